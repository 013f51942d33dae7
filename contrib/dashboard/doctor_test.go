package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The overview carries the doctor's cheap findings: with the dead-letter
// index dropped, /api/overview names it within a refresh or two, and the
// page lists it.
func TestOverviewShowsDoctorFindings(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	if _, err := db.pool.Exec(ctxT(t), `DROP INDEX "`+db.schema+`".outbox_events_dead_idx`); err != nil {
		t.Fatal(err)
	}
	srv, _ := newServer(t, db, nil)
	index := db.schema + ".outbox_events_dead_idx"
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, body := get(t, http.DefaultClient, srv.URL+"/api/overview")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/api/overview: %d %s", resp.StatusCode, body)
		}
		var ov overview
		if err := json.Unmarshal([]byte(body), &ov); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range ov.Targets[0].Doctor {
			found = found || f.Check == "indexes" && strings.Contains(f.Object, index)
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no doctor finding naming %s in the overview: %+v", index, ov.Targets[0].Doctor)
		}
		time.Sleep(50 * time.Millisecond) // polling the endpoint, with a deadline
	}
	_, page := get(t, http.DefaultClient, srv.URL+"/")
	if !strings.Contains(page, "outbox_events_dead_idx") || !strings.Contains(page, `data-f="doctor"`) {
		t.Error("the overview page does not list the doctor's finding")
	}
}
