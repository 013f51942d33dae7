package databasesql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a migrated schema with a business table, a store on db and
// the database/sql handle.
type fixture struct {
	db     *sql.DB
	store  *postgres.Store
	schema string
}

func newFixture(t *testing.T, driver string) fixture {
	t.Helper()
	db := openDB(t, driver, 4)
	schema := migrated(t, db)
	if _, err := db.ExecContext(ctxT(t), `CREATE TABLE "`+schema+`".orders (id text PRIMARY KEY, total int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(db, &postgres.Config{Schema: schema, Wakeup: postgres.WakeupPoll})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{db: db, store: s, schema: schema}
}

func (f fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := f.db.QueryRowContext(ctxT(t), `SELECT count(*) FROM "`+f.schema+`".`+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func event(i int) core.Event {
	return core.Event{
		ID: core.NewID(), Type: "order.placed", AggregateType: "order", AggregateID: fmt.Sprint("o-", i),
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"note":"quote \" and backslash \\ and {braces}, commas"}`, i)),
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k": `va"l,{}`},
	}
}

// The case: with lib/pq, a two-event Add failed with a misleading
// check-constraint error (lib/pq sent the headers' JSON as bytea). Every
// driver now writes several events, in the caller's transaction, and they
// read back exactly as written.
func TestAddInSQLTx(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, d)
			ctx := ctxT(t)
			evs := []core.Event{event(1), event(2)}
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO "`+f.schema+`".orders VALUES ($1, $2)`, "o-1", 10); err != nil {
				t.Fatal(err)
			}
			if err := f.store.Add(ctx, postgres.SQL(tx), evs...); err != nil {
				t.Fatalf("Add of two events in a *sql.Tx: %v", err)
			}
			if err := f.store.Add(ctx, postgres.SQL(tx), event(3)); err != nil {
				t.Fatalf("Add of one event in a *sql.Tx: %v", err)
			}
			if n := f.count(t, "outbox_events"); n != 0 {
				t.Fatalf("%d events visible before the commit", n)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				got, err := f.store.Get(ctx, e.ID)
				if err != nil {
					t.Fatalf("Get %s: %v", e.ID, err)
				}
				if !sameJSON(t, got.Payload, e.Payload) || got.Headers["k"] != e.Headers["k"] || got.AggregateID != e.AggregateID {
					t.Errorf("read back %+v; wrote %+v", got.Event, e)
				}
			}
		})
	}
}

// sameJSON reports whether a and b hold the same JSON value (jsonb
// reformats what it stores).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// A rolled-back transaction leaves neither the business row nor its
// events.
func TestAddRollsBackWithSQLTx(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, d)
			ctx := ctxT(t)
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO "`+f.schema+`".orders VALUES ($1, $2)`, "o-1", 10); err != nil {
				t.Fatal(err)
			}
			if err := f.store.Add(ctx, postgres.SQL(tx), event(1), event(2)); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if n, o := f.count(t, "outbox_events"), f.count(t, "orders"); n != 0 || o != 0 {
				t.Fatalf("after rollback: %d events, %d orders; want none", n, o)
			}
		})
	}
}

// *sql.DB and *sql.Conn work as writers too (each statement commits by
// itself), and the store's errors keep their meaning through either
// driver: a duplicate ID matches ErrDuplicateEvent, a missing schema
// ErrNotMigrated.
func TestSQLHandlesAndErrors(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, d)
			ctx := ctxT(t)
			e := event(1)
			if err := f.store.Add(ctx, postgres.SQL(f.db), e); err != nil {
				t.Fatalf("Add on *sql.DB: %v", err)
			}
			conn, err := f.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := f.store.Add(ctx, postgres.SQL(conn), event(2), event(3)); err != nil {
				t.Fatalf("Add on *sql.Conn: %v", err)
			}
			if n := f.count(t, "outbox_events"); n != 3 {
				t.Fatalf("%d events; want 3", n)
			}
			if err := f.store.Add(ctx, postgres.SQL(f.db), e); !errors.Is(err, postgres.ErrDuplicateEvent) {
				t.Errorf("Add of a stored ID = %v; want ErrDuplicateEvent", err)
			}
			other, err := postgres.New(f.db, &postgres.Config{Schema: "sqldb_never_migrated", Wakeup: postgres.WakeupPoll})
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Add(ctx, postgres.SQL(f.db), event(4)); !errors.Is(err, postgres.ErrNotMigrated) {
				t.Errorf("Add to an unmigrated schema = %v; want ErrNotMigrated", err)
			}
			if _, err := f.store.Get(ctx, core.NewID()); !errors.Is(err, postgres.ErrNotFound) {
				t.Errorf("Get of an unknown ID = %v; want ErrNotFound", err)
			}
		})
	}
}
