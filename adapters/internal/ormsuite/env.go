package ormsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Env is a fresh schema, dropped when the test ends, with the outbox
// migrated in it and the business tables the scenario writes:
//
//	orders   (id text PRIMARY KEY, total bigint NOT NULL)
//	invoices (id text PRIMARY KEY, order_id text NOT NULL, cents bigint NOT NULL)
//
// An invoice's id is the ID of the event that made it, so an effect applied
// twice would fail on the primary key or show as a second row.
type Env struct {
	// Pool is a pgx pool the suite checks outcomes with, outside the ORM.
	Pool *pgxpool.Pool
	// Schema is the schema's name: the outbox's Config.Schema.
	Schema string
	// URL is DATABASE_URL (or the local server) with the schema as its
	// search_path, so the ORM's unqualified table names resolve to it.
	URL string
}

// businessDDL creates the tables the ORMs' models map to.
const businessDDL = `CREATE TABLE orders (id text PRIMARY KEY, total bigint NOT NULL);
CREATE TABLE invoices (id text PRIMARY KEY, order_id text NOT NULL, cents bigint NOT NULL)`

// NewEnv creates the schema, migrates the outbox in it and creates the
// business tables.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	pool := pgtest.Pool(t, 2)
	schema := pgtest.Schema(t, pool, "orm")
	ctx := Ctx(t)
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate the outbox: %v", err)
	}
	if _, err := pool.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()+"; "+businessDDL); err != nil {
		t.Fatalf("create the business tables: %v", err)
	}
	u, err := url.Parse(pgtest.URL())
	if err != nil || u.Scheme == "" {
		t.Fatalf("ormsuite: DATABASE_URL must be a postgres:// URL to add a search_path to")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return &Env{Pool: pool, Schema: schema, URL: u.String()}
}

// Ctx returns a context cancelled when t ends, bounded so that a hung
// statement fails the test instead of the whole run.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Store returns a Store for env's schema on the ORM's *sql.DB.
func (env *Env) Store(t testing.TB, drv Driver) *postgres.Store {
	t.Helper()
	s, err := postgres.New(drv.DB, &postgres.Config{Schema: env.Schema})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

// Count runs SELECT count(*) FROM <schema>.<table> WHERE <where>.
func (env *Env) Count(t testing.TB, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	q := fmt.Sprintf("SELECT count(*) FROM %s.%s WHERE %s", pgx.Identifier{env.Schema}.Sanitize(), pgx.Identifier{table}.Sanitize(), where)
	if err := env.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("count %s where %s: %v", table, where, err)
	}
	return n
}

// Order is the business row: orders(id, total).
type Order struct {
	ID    string
	Total int64
}

// Paid is the payload of the events the scenario consumes: the effect
// writes an invoice for OrderID of Cents.
type Paid struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

// PaidEvent returns an "order.paid" event for p.
func PaidEvent(t testing.TB, p Paid) core.Event {
	t.Helper()
	e, err := core.NewEvent("order.paid", p)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// DecodePaid decodes an event's payload.
func DecodePaid(e core.Event) (Paid, error) {
	var p Paid
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return Paid{}, fmt.Errorf("event %s: decode order.paid: %w", e.ID, err)
	}
	return p, nil
}
