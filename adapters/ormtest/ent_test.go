package ormtest_test

import (
	"context"
	"database/sql"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/outboxkit/outboxkit/adapters/internal/ormsuite"
	"github.com/outboxkit/outboxkit/adapters/ormtest/internal/ent"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// openEnt opens an ent client on url with the database/sql driver named,
// closed when t ends; it returns the *sql.DB under it too.
func openEnt(t testing.TB, driver, url string) (*ent.Client, *sql.DB) {
	t.Helper()
	db, err := sql.Open(driver, url)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(3)
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	t.Cleanup(func() { _ = client.Close() })
	return client, db
}

func entDriver(driver string) ormsuite.Open {
	return func(t *testing.T, env *ormsuite.Env) ormsuite.Driver {
		client, db := openEnt(t, driver, env.URL)
		return ormsuite.Driver{
			DB: db,
			PlaceOrder: func(ctx context.Context, store *postgres.Store, o ormsuite.Order, events []core.Event, commit bool) error {
				tx, err := client.Tx(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback() //nolint:errcheck // after Commit it returns an error, and does nothing
				if err := tx.Order.Create().SetID(o.ID).SetTotal(o.Total).Exec(ctx); err != nil {
					return err
				}
				// *ent.Tx has ExecContext and QueryContext (sql/execquery).
				if err := store.Add(ctx, postgres.SQL(tx), events...); err != nil {
					return err
				}
				if !commit {
					return tx.Rollback()
				}
				return tx.Commit()
			},
			// The Deduper's transaction is a *sql.Tx: an ent client on it
			// (entClient, in example_test.go) writes the invoice.
			Invoice: func(fail func() error) core.Handler {
				return postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
					p, err := ormsuite.DecodePaid(e)
					if err != nil {
						return err
					}
					if err := entClient(tx).Invoice.Create().SetID(e.ID.String()).SetOrderID(p.OrderID).SetCents(p.Cents).Exec(ctx); err != nil {
						return err
					}
					return fail()
				})
			},
			// Joining, the effect gets the caller's own *ent.Tx.
			JoinTx: func(ctx context.Context, d *postgres.Deduper, o ormsuite.Order, e core.Event, fail error, commit bool) (applied bool, onceErr, err error) {
				tx, err := client.Tx(ctx)
				if err != nil {
					return false, nil, err
				}
				defer tx.Rollback() //nolint:errcheck // after Commit it returns an error, and does nothing
				if err := tx.Order.Create().SetID(o.ID).SetTotal(o.Total).Exec(ctx); err != nil {
					return false, nil, err
				}
				h := postgres.SQLEffect(func(ctx context.Context, tx *ent.Tx, e core.Event) error {
					p, err := ormsuite.DecodePaid(e)
					if err != nil {
						return err
					}
					if err := tx.Invoice.Create().SetID(e.ID.String()).SetOrderID(p.OrderID).SetCents(p.Cents).Exec(ctx); err != nil {
						return err
					}
					return fail
				})
				key := core.DedupeKey{Consumer: ormsuite.JoinConsumer, EventID: e.ID}
				applied, onceErr = d.OnceTx(ctx, postgres.SQL(tx), key, func(ctx context.Context) error { return h.Handle(ctx, e) })
				if err := tx.Order.UpdateOneID(o.ID).SetTotal(2 * o.Total).Exec(ctx); err != nil {
					return applied, onceErr, err
				}
				if !commit {
					return applied, onceErr, tx.Rollback()
				}
				return applied, onceErr, tx.Commit()
			},
		}
	}
}

func TestEntLibPQ(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, entDriver("postgres"))
}

func TestEntPgxStdlib(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, entDriver("pgx"))
}

// An ent client on the Deduper's *sql.Tx runs the mutations that ent
// wraps in a transaction of their own (UpdateOne, here) inside it, rather
// than failing or beginning another: they roll back with the effect.
func TestEntClientOnATxStaysInIt(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	ctx := ormsuite.Ctx(t)
	_, db := openEnt(t, "pgx", env.URL)
	if _, err := env.Pool.Exec(ctx, "INSERT INTO "+env.Schema+".orders (id, total) VALUES ('o', 1)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := entClient(tx).Order.UpdateOneID("o").SetTotal(2).Exec(ctx); err != nil {
		_ = tx.Rollback()
		t.Fatalf("UpdateOne on a client in a transaction: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := env.Count(t, "orders", "id = 'o' AND total = 1"); n != 1 {
		t.Fatal("the update outlived the rolled-back transaction: it ran outside it")
	}
}
