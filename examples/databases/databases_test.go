package databases

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // "postgres"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.uber.org/goleak"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// TestMain checks that no test leaves a goroutine behind, but for the one
// GORM's prepared-statement cache starts and never stops (its
// internal/lru: "done channel is never closed"), which TestGORM's
// PrepareStmt session starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}

// fixture is a schema with outboxkit's tables and the snippets' orders and
// invoices, and a URL whose connections run in it (search_path).
type fixture struct {
	schema, url string
	store       *postgres.Store
	dedup       *postgres.Deduper
	check       *sql.DB
}

func newFixture(t *testing.T, driver string) *fixture {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t, 1)
	schema := pgtest.Schema(t, pool, "dbs")
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	f := &fixture{schema: schema, url: u.String()}
	f.check = openDB(t, driver, f.url)
	// The database/sql snippet's setup: migrations, store and deduper on
	// one *sql.DB.
	if f.store, f.dedup, err = OpenSQL(ctx, f.check, schema); err != nil {
		t.Fatalf("OpenSQL: %v", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "orders"}.Sanitize()+` (id text PRIMARY KEY, cents bigint NOT NULL);
		CREATE TABLE `+pgx.Identifier{schema, "invoices"}.Sanitize()+` (order_id text PRIMARY KEY, cents bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return f
}

func openDB(t *testing.T, driver, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantPlaced fails t unless order id is in the orders table and the outbox
// holds n pending events, the last one the order's.
func (f *fixture) wantPlaced(t *testing.T, id string, n int64) {
	t.Helper()
	ctx := ctxT(t)
	var cents int64
	if err := f.check.QueryRowContext(ctx, `SELECT cents FROM orders WHERE id = $1`, id).Scan(&cents); err != nil {
		t.Fatalf("order %s: %v", id, err)
	}
	st, err := f.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != n {
		t.Fatalf("%d pending events after order %s, want %d", st.Pending, id, n)
	}
	var aggregate string
	if err := f.check.QueryRowContext(ctx, `SELECT payload->>'id' FROM outbox_events ORDER BY pos DESC LIMIT 1`).Scan(&aggregate); err != nil || aggregate != id {
		t.Fatalf("the last event is for order %q (%v), want %s", aggregate, err, id)
	}
}

func (f *fixture) invoices(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.check.QueryRowContext(ctxT(t), `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDatabaseSQL(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"postgres", "pgx"} { // lib/pq, pgx's stdlib
		t.Run(driver, func(t *testing.T) {
			f := newFixture(t, driver)
			ctx := ctxT(t)
			if err := PlaceOrderSQL(ctx, f.check, f.store, "o-1", 1250); err != nil {
				t.Fatal(err)
			}
			f.wantPlaced(t, "o-1", 1)

			e, err := core.NewEvent("order.placed", OrderPlaced{ID: "o-1", Cents: 1250})
			if err != nil {
				t.Fatal(err)
			}
			h := core.Idempotent(f.dedup, "invoicing")(InvoiceSQL())
			for range 2 { // delivered twice, applied once
				if err := h.Handle(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			if n := f.invoices(t); n != 1 {
				t.Fatalf("%d invoices, want 1", n)
			}
		})
	}
}

func TestSQLX(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "postgres")
	ctx := ctxT(t)
	db := sqlx.NewDb(openDB(t, "postgres", f.url), "postgres")
	if err := PlaceOrderSQLX(ctx, db, f.store, "o-2", 990); err != nil {
		t.Fatal(err)
	}
	f.wantPlaced(t, "o-2", 1)

	e, err := core.NewEvent("order.placed", OrderPlaced{ID: "o-2", Cents: 990})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		applied, err := ApplyInSQLX(ctx, tx, f.dedup, e, OrderPlaced{ID: "o-2", Cents: 990})
		if err != nil || applied != want {
			t.Fatalf("delivery %d: applied %v (%v), want %v", i+1, applied, err, want)
		}
		// The duplicate left the transaction usable: it commits.
		if err := tx.Commit(); err != nil {
			t.Fatalf("delivery %d: commit: %v", i+1, err)
		}
	}
	if n := f.invoices(t); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}
}

func TestGORM(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "pgx")
	db, err := gorm.Open(gormpg.Open(f.url), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	if err := PlaceOrderGORM(ctxT(t), db, f.store, "o-3", 700); err != nil {
		t.Fatal(err)
	}
	f.wantPlaced(t, "o-3", 1)

	// With PrepareStmt on, the snippet says why it cannot go on.
	prep := db.Session(&gorm.Session{PrepareStmt: true})
	if err := PlaceOrderGORM(ctxT(t), prep, f.store, "o-4", 1); err == nil {
		t.Fatal("PlaceOrderGORM with PrepareStmt succeeded: its event would not be in the transaction")
	}
	f.wantPlaced(t, "o-3", 1) // and o-4 rolled back
}

func TestBun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "pgx")
	db := bun.NewDB(openDB(t, "pgx", f.url), pgdialect.New())
	if err := PlaceOrderBun(ctxT(t), db, f.store, "o-5", 300); err != nil {
		t.Fatal(err)
	}
	f.wantPlaced(t, "o-5", 1)
}

func TestPgBouncer(t *testing.T) {
	t.Parallel()
	pgtest.RequireBouncer(t)
	f := newFixture(t, "pgx")
	ctx := ctxT(t)
	pool, store, err := OpenThroughPgBouncer(ctx, pgtest.BouncerURLWithMaxConns(t, 2), pgtest.URL(), f.schema)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.Check(ctx); err != nil {
		t.Fatalf("Check through PgBouncer: %v", err)
	}
	// Twice, so the second statement likely lands on another server
	// connection than the first one's.
	for _, id := range []string{"o-7", "o-8"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{f.schema, "orders"}.Sanitize()+` (id, cents) VALUES ($1, 1)`, id); err != nil {
				return err
			}
			e, err := core.NewEvent("order.placed", OrderPlaced{ID: id, Cents: 1})
			if err != nil {
				return err
			}
			return store.Add(ctx, tx, e)
		})
		if err != nil {
			t.Fatalf("order %s through PgBouncer: %v", id, err)
		}
	}
	f.wantPlaced(t, "o-8", 2)
}
