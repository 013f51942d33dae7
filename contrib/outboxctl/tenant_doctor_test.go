package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A tenant's /readyz entry carries the doctor's cheap findings without
// turning the service unready: with the dead-letter index dropped, the
// indexes check names it within a check round, and /readyz stays 200.
func TestRelayServiceReadinessShowsDoctorFindings(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	p := start(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll")...)
	base := httpAddr(t, p)
	waitFor(t, 30*time.Second, "/readyz 200", func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	index := o.schema + ".outbox_events_dead_idx"
	if _, err := o.pool.Exec(ctxT(t), `DROP INDEX "`+o.schema+`".outbox_events_dead_idx`); err != nil {
		t.Fatal(err)
	}
	var found tenantStatus
	waitFor(t, 60*time.Second, "the dropped index among the tenant's doctor findings", func() bool {
		if p.exited() {
			t.Fatalf("relay exited (code %d):\n%s", p.code, p.stderr)
		}
		code, rep := readyz(t, base)
		for _, ts := range rep.Tenants {
			for _, f := range ts.Doctor {
				if f.Check == "indexes" && strings.Contains(f.Object, index) {
					found = ts
					return code == http.StatusOK
				}
			}
		}
		return false
	})
	if !found.Ready {
		t.Errorf("tenant with a doctor finding: %+v; findings must not make it unready", found)
	}
}
