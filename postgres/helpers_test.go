package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// testDB is a pool and a migrated, isolated schema.
type testDB struct {
	pool   *pgxpool.Pool
	schema string
}

// newDB returns a small pool and a fresh migrated schema, both gone when t
// ends. Pools stay small: other packages test against the same server.
func newDB(t testing.TB, maxConns int32) testDB {
	t.Helper()
	pool := pgtest.Pool(t, maxConns)
	return testDB{pool: pool, schema: migratedSchema(t, pool)}
}

func migratedSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	// Not "pg": PostgreSQL reserves the pg_ prefix for system schemas.
	schema := pgtest.Schema(t, pool, "pgstore")
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return schema
}

func newStore(t testing.TB, db testDB, cfg postgres.Config) *postgres.Store {
	t.Helper()
	cfg.Schema = db.schema
	s, err := postgres.New(db.pool, &cfg)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	// Registered after the pool's cleanup, so it runs first: no
	// after-commit notification outlives the test or its pool.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.WaitNotifiedForTest(ctx); err != nil {
			t.Errorf("after-commit notifications still running at the end of the test: %v", err)
		}
	})
	return s
}

// ctxT returns a context cancelled when t ends, bounded so a hung query
// fails the test instead of the whole run.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustEvent(t testing.TB, typ string, payload any) core.Event {
	t.Helper()
	e, err := core.NewEvent(typ, payload)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func events(t testing.TB, n int, typ string) []core.Event {
	out := make([]core.Event, n)
	for i := range out {
		out[i] = mustEvent(t, typ, map[string]int{"n": i})
	}
	return out
}

// addTx writes events in their own transaction.
func addTx(ctx context.Context, s *postgres.Store, pool *pgxpool.Pool, evs ...core.Event) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := s.Add(ctx, tx, evs...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// waitFor polls cond until it holds or the deadline passes. It is for
// conditions that depend on other goroutines; it never stands in for a
// synchronisation the code under test should provide.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func count(t testing.TB, db testDB, where string) int64 {
	t.Helper()
	var n int64
	q := fmt.Sprintf(`SELECT count(*) FROM %q.outbox_events WHERE %s`, db.schema, where)
	if err := db.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", where, err)
	}
	return n
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func jsonUnmarshal(b []byte, v any) error {
	return json.Unmarshal(b, v)
}
