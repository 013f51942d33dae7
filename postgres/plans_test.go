package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// relayCycles adds, claims and settles one event n times, the way a relay
// at a low event rate does.
func relayCycles(t *testing.T, s *postgres.Store, db testDB, n int) {
	t.Helper()
	published := func(core.Event) core.Outcome { return core.Outcome{Kind: core.Published} }
	for i := 0; i < n; i++ {
		if err := s.Add(ctxT(t), db.pool, mustEvent(t, "plans", map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
		if got := len(claimAll(t, s, published)); got != 1 {
			t.Fatalf("cycle %d claimed %d events, want 1", i, got)
		}
	}
}

// preparedRelayStatements returns the names and parameter counts of the
// statements prepared on the pool's (single) connection that lease or
// settle events.
func preparedRelayStatements(t *testing.T, db testDB) map[string]int {
	t.Helper()
	rows, err := db.pool.Query(ctxT(t), `SELECT name, cardinality(parameter_types) FROM pg_prepared_statements
		WHERE statement LIKE '%lease_token%' AND statement LIKE '%`+db.schema+`%'
			AND statement NOT LIKE '%pg_prepared_statements%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var params int
		if err := rows.Scan(&name, &params); err != nil {
			t.Fatal(err)
		}
		out[name] = params
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A relay on a new, empty table must not have PostgreSQL cache generic
// plans made for that size: they scan the whole table and are kept while
// it grows. One connection, so the prepared statements seen are the
// store's.
func TestYoungTableRelayStatementsAreNotPrepared(t *testing.T) {
	db := newDB(t, 1)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyOff})
	relayCycles(t, s, db, 12)
	if got := preparedRelayStatements(t, db); len(got) != 0 {
		t.Fatalf("relay statements prepared on a young table: %v", got)
	}
}

// Once the table has grown, the relay's statements are prepared, and their
// generic plans reach rows by address or index, never by a scan of the
// table. With the statements prepared from the first claim, the generic
// plans cached while the table was empty would still scan it.
func TestRelayPlansUseAddressesAfterTheTableGrew(t *testing.T) {
	db := newDB(t, 1)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyOff})
	ctx := ctxT(t)
	relayCycles(t, s, db, 12) // young: planned per execution

	// History arrives: published rows, as a busy outbox keeps until they
	// are pruned.
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+db.schema+`.outbox_events (event_type, payload, published_at)
		SELECT 'plans.history', '{}', now() FROM generate_series(1, 6000)`); err != nil {
		t.Fatal(err)
	}
	relayCycles(t, s, db, 12) // past the first five executions: generic plans are in use

	stmts := preparedRelayStatements(t, db)
	if len(stmts) < 2 {
		t.Fatalf("want the claim and the settlement prepared once the table grew, got %v", stmts)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), "RESET plan_cache_mode") }()
	for name, params := range stmts {
		var plan []byte
		nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+"("+nulls+")").Scan(&plan); err != nil {
			t.Fatalf("explain %s: %v", name, err)
		}
		var root []struct{ Plan planNode }
		if err := json.Unmarshal(plan, &root); err != nil {
			t.Fatal(err)
		}
		root[0].Plan.walk(func(n planNode) {
			if n.NodeType == "Seq Scan" && n.RelationName == "outbox_events" {
				t.Errorf("generic plan of %s (%d parameters) scans the table:\n%s", name, params, plan)
			}
		})
	}
}
