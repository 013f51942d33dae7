package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/postgres"
)

// TestStatusAndDoctorPartitioned: status and doctor read a partitioned
// outbox (rows in period partitions and in the default one) as they read
// a plain one: status counts every partition; doctor's checks of the
// outbox's own objects find nothing wrong, and those that do not cover
// partitioned tables yet say they skipped.
func TestStatusAndDoctorPartitioned(t *testing.T) {
	t.Parallel()
	o := newPartitionedOutbox(t, postgres.PartitionHourly)
	o.insertSQL(t, 3, "pending")
	// 40 days old, before any partition: the default partition.
	o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, created_at) VALUES (gen_random_uuid(), 'old.pending', '{}', now() - interval '40 days')`)
	o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, dead_at, last_error) VALUES (gen_random_uuid(), 'dead', '{}', now(), 'poison')`)
	o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, published_at) VALUES (gen_random_uuid(), 'done', '{}', now())`)
	if n := countIn(t, o, "outbox_events_default"); n != 1 {
		t.Fatalf("%d rows in the default partition, want 1", n)
	}

	r := cli(t, env(), o.args("status", "--json")...)
	wantOK(t, r)
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.Pending != 4 || st.DeadLettered != 1 || st.Leased != 0 || st.OldestPendingAgeSeconds < 39*86400 || !st.Migrations.Current {
		t.Errorf("status --json on the partitioned layout: %s", r.stdout)
	}
	r = cli(t, env(), o.args("status")...)
	wantOK(t, r)

	r = runCommand(t, env(), "doctor", o.args("--checks", outboxChecks, "--json")...)
	var rep doctorJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.DoctorReport == nil {
		t.Fatalf("doctor --json (exit %d): %v\nstdout:\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
	}
	if r.code != 0 || !rep.Healthy {
		t.Errorf("doctor on a healthy partitioned outbox (exit %d):\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// Every check, findings about the server (autovacuum off) allowed:
	// none may fail to run.
	r = runCommand(t, env(), "doctor", o.args("--fail-on", "never", "--json")...)
	wantOK(t, r)
	// A check that does not cover partitioned tables says so, in the
	// text report too.
	for _, sk := range rep.Skipped {
		if sk.Reason == "" {
			t.Errorf("doctor skipped %s without saying why", sk.Check)
		}
	}
	r = runCommand(t, env(), "doctor", o.args("--checks", outboxChecks)...)
	wantOK(t, r)
	if len(rep.Skipped) > 0 && !strings.Contains(r.stdout, "SKIPPED   "+rep.Skipped[0].Check+": ") {
		t.Errorf("doctor's text report does not show the skipped checks:\n%s", r.stdout)
	}
	t.Logf("doctor on the partitioned layout skips %d of its checks of the outbox's objects", len(rep.Skipped))
}
