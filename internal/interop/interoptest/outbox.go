package interoptest

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/tracing"
)

// Outbox is a migrated schema of its own with a business table (orders), a
// table the consumer writes (shipments), and a postgres Store whose
// BeforeAdd is tracing.NewInjector: service code calls Add and nothing
// else, as the wiring guide says.
type Outbox struct {
	Pool   *pgxpool.Pool
	Schema string
	Store  *postgres.Store
}

// NewOutbox returns an Outbox whose injector takes opts.
func NewOutbox(t testing.TB, opts ...tracing.Option) *Outbox {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.Pool(t, 4)
	// Not "pg_...": PostgreSQL reserves that prefix for system schemas.
	schema := pgtest.Schema(t, pool, "trace")
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	o := &Outbox{Pool: pool, Schema: schema}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+o.Table("orders")+` (id text PRIMARY KEY);
CREATE TABLE `+o.Table("shipments")+` (event_id text PRIMARY KEY)`); err != nil {
		t.Fatalf("create business tables: %v", err)
	}
	store, err := postgres.New(pool, &postgres.Config{
		Schema:    schema,
		BeforeAdd: tracing.NewInjector(opts...),
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Store = store
	return o
}

// Table is the quoted name of table name in the Outbox's schema.
func (o *Outbox) Table(name string) string { return pgx.Identifier{o.Schema, name}.Sanitize() }

// PlaceOrder is the request handler's transaction: the order row and its
// events commit together. It passes the request's ctx to Add and does
// nothing else for tracing.
func (o *Outbox) PlaceOrder(ctx context.Context, t testing.TB, orderID string, events ...core.Event) {
	t.Helper()
	err := pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+o.Table("orders")+` (id) VALUES ($1)`, orderID); err != nil {
			return err
		}
		return o.Store.Add(ctx, tx, events...)
	})
	if err != nil {
		t.Fatalf("place order %s: %v", orderID, err)
	}
}

// ShipHandler is the consumer's effect: a "ship order" span and a
// shipments row written in the Deduper's transaction (a postgres.Deduper's).
func (o *Outbox) ShipHandler(env *OTelEnv) core.Handler {
	return core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		ctx, span := env.Tracer().Start(ctx, "ship order")
		defer span.End()
		tx, ok := postgres.TxFromContext(ctx)
		if !ok {
			return core.Permanent(errors.New("no Deduper transaction in the handler's context"))
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+o.Table("shipments")+` (event_id) VALUES ($1)`, e.ID.String())
		return err
	})
}

// Shipments counts the shipments rows.
func (o *Outbox) Shipments(t testing.TB) int {
	t.Helper()
	var n int
	if err := o.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+o.Table("shipments")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
