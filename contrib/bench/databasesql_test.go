package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestSmokeDatabaseSQL runs the database/sql variants (-databasesql) at
// tiny sizes: writers on a *sql.Tx of each driver, their events counted in
// the outbox, and a drain of a Store on a *sql.DB of each driver, checked
// like every drain (every event at the sink, every row settled, nothing
// settled under a lost lease).
func TestSmokeDatabaseSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs PostgreSQL through two database/sql drivers")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := parseOptions([]string{"-databasesql", "-events", "2000", "-write-duration", "250ms", "-writers", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := newPool(ctx, o.dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := &bench{o: o, admin: admin, log: io.Discard, stderr: io.Discard, rep: &Report{}}
	defer b.dropLeftovers(context.Background())

	ws, err := b.writeSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.drop() //nolint:errcheck // dropLeftovers tries again
	cases := b.sqlWriteCases()
	if len(cases) != 2*len(sqlDrivers) {
		t.Fatalf("%d database/sql write cases, want %d", len(cases), 2*len(sqlDrivers))
	}
	for _, c := range cases {
		if err := resetWrite(ctx, ws); err != nil {
			t.Fatal(err)
		}
		res, err := b.writeSQL(ctx, ws.main, c, "")
		if err != nil {
			t.Fatalf("write %s %s: %v", c.name, c.system, err)
		}
		events, err := tableCount(ctx, ws.main, "outbox_events")
		if err != nil {
			t.Fatal(err)
		}
		if !(res.tps > 0) || !(res.procCPU > 0) || (events > 0) != c.event {
			t.Errorf("write %s %s: %.0f tx/s, %.1f µs of Go CPU per tx, %d events in the outbox", c.name, c.system, res.tps, res.procCPU, events)
		}
	}

	for _, kind := range []relayKind{kindSQLPQ, kindSQLPQBinary, kindSQLStdlib} {
		res, err := b.drainOutboxkit(ctx, 100, kind, "")
		if err != nil {
			t.Fatalf("drain on *sql.DB (%s): %v", kind.sqlDriver(), err)
		}
		if !res.check.OK || !(res.rate(o.events) > 0) || !(res.claimMs > 0) {
			t.Errorf("drain on *sql.DB (%s): %.0f events/s, claim %.2f ms, check %s", kind.sqlDriver(), res.rate(o.events), res.claimMs, res.check.Detail)
		}
	}
}
