package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

func TestStatusMaxAgeExitCodes(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)

	// Empty outbox: healthy whatever the threshold.
	r := cli(t, env(), o.args("status", "--max-age", "1s")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "pending:") {
		t.Errorf("status output lacks the pending count:\n%s", r.stdout)
	}

	// A fresh event is within any sensible threshold.
	o.insertSQL(t, 1, "fresh")
	wantOK(t, cli(t, env(), o.args("status", "--max-age", "1h")...))

	// An event waiting for two hours is stale at 1h, fresh at 1d.
	o.exec(t, "INSERT INTO "+o.table()+" (id, event_type, payload, created_at) VALUES ($1, 'stale', '{}', now() - interval '2 hours')", core.NewID().String())
	r = cli(t, env(), o.args("status", "--max-age", "1h")...)
	wantOneLineError(t, r, exitCheckFailed, "oldest pending event has waited 2h", "--max-age 1h")
	if !strings.Contains(r.stdout, "oldest pending age:  2h") {
		t.Errorf("the report is printed even when stale, got:\n%s", r.stdout)
	}
	wantOK(t, cli(t, env(), o.args("status", "--max-age", "1d")...))
	// Without --max-age status only reports.
	wantOK(t, cli(t, env(), o.args("status")...))

	// --json carries the verdict too, and exits the same way.
	r = cli(t, env(), o.args("status", "--json", "--max-age", "90m")...)
	if r.code != exitCheckFailed {
		t.Fatalf("status --json --max-age 90m exited %d, want 1: %s", r.code, r.stderr)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.Pending != 2 || st.OldestPendingAgeSeconds < 7190 || st.OldestPendingAt == nil ||
		st.Healthy == nil || *st.Healthy || st.MaxAgeSeconds == nil || *st.MaxAgeSeconds != 5400 || st.Attempts["0"] != 2 {
		t.Errorf("status --json = %+v", st)
	}
}

func TestStatusCounts(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	dead := event(t, "dead", "", "")
	o.add(t, event(t, "published", "", ""), dead)
	o.settle(t, func(e core.Event) core.OutcomeKind {
		if e.ID == dead.ID {
			return core.DeadLettered
		}
		return core.Published
	}, "boom")
	o.add(t, event(t, "retrying", "", ""))
	o.settle(t, func(core.Event) core.OutcomeKind { return core.Retry }, "try again")
	o.add(t, event(t, "leased", "", ""), event(t, "waiting", "", ""))
	if _, err := o.store.Claim(ctxT(t), core.ClaimRequest{Limit: 1, LeaseFor: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}

	r := cli(t, env(), o.args("status", "--json")...)
	wantOK(t, r)
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	// Pending: retrying, leased, waiting. Retried once, claimed once, never.
	if st.Pending != 3 || st.Leased != 1 || st.DeadLettered != 1 || st.Healthy != nil {
		t.Errorf("status --json = %+v, want 3 pending, 1 leased, 1 dead-lettered", st)
	}
	if st.Attempts["0"] != 1 || st.Attempts["1"] != 2 {
		t.Errorf("attempts = %v, want 0:1 1:2", st.Attempts)
	}
	r = cli(t, env(), o.args("status")...)
	wantOK(t, r)
	for _, want := range []string{"pending:             3", "leased:              1", "dead-lettered:       1", "0:1 1:2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestStatusZeroMaxAge: --max-age 0s used to turn the check off and exit
// 0 whatever the outbox held; a check that checks nothing is refused.
func TestStatusZeroMaxAge(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	o.exec(t, "INSERT INTO "+o.table()+" (id, event_type, payload, created_at) VALUES ($1, 'stale', '{}', now() - interval '2 hours')", core.NewID().String())
	r := cli(t, env(), o.args("status", "--max-age", "0s")...)
	wantOneLineError(t, r, exitError, "--max-age")
}

// TestStatusReportsMigrationState: after `migrate down`, relay refuses to
// start, yet status used to exit 0. It reports the migration state and
// exits 2 while the schema is behind, 0 once it is current.
func TestStatusReportsMigrationState(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	m, err := postgres.NewMigrator(o.pool, &postgres.MigrateConfig{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	known := len(m.Migrations())
	o.insertSQL(t, 1, "pending")

	r := cli(t, env(), o.args("status")...)
	wantOK(t, r)
	if want := fmt.Sprintf("migrations:          %d of %d applied", known, known); !strings.Contains(r.stdout, want) {
		t.Errorf("status lacks %q:\n%s", want, r.stdout)
	}
	r = cli(t, env(), o.args("status", "--json")...)
	wantOK(t, r)
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if st.Migrations.Applied != known || st.Migrations.Known != known || len(st.Migrations.Missing) != 0 || !st.Migrations.Current {
		t.Errorf("status --json migrations = %+v", st.Migrations)
	}

	for _, to := range []int{known - 1, 1} {
		wantOK(t, cli(t, env(), o.args("migrate", "down", "--to", strconv.Itoa(to), "--yes")...))
		r = cli(t, env(), o.args("status")...)
		wantOneLineError(t, r, exitError, "lacks migration(s)", "outboxctl migrate --schema "+o.schema)
		if want := fmt.Sprintf("migrations:          %d of %d applied", to, known); !strings.Contains(r.stdout, want) {
			t.Errorf("after migrate down --to %d, status lacks %q:\n%s", to, want, r.stdout)
		}
		r = cli(t, env(), o.args("status", "--json", "--max-age", "1h")...)
		wantOneLineError(t, r, exitError, "lacks migration(s)")
		st = statusJSON{}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json after migrate down: %v\n%s", err, r.stdout)
		}
		if st.Migrations.Applied != to || st.Migrations.Current || len(st.Migrations.Missing) != known-to || st.Migrations.Missing[0] != to+1 {
			t.Errorf("status --json migrations after migrate down --to %d = %+v", to, st.Migrations)
		}
		// The relay agrees.
		r = cli(t, env(), o.args("relay", "--qstash-token", "x", "--destination", "https://example.com/hook", "--drain")...)
		wantOneLineError(t, r, exitError, "lacks migration(s)")
	}

	wantOK(t, cli(t, env(), o.args("migrate")...))
	wantOK(t, cli(t, env(), o.args("status")...))
}
