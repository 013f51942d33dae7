package ormtest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // registers "postgres"

	"github.com/outboxkit/outboxkit/adapters/internal/ormsuite"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// order and invoice are the sqlx tests' rows.
type order struct {
	ID    string `db:"id"`
	Total int64  `db:"total"`
}

type invoice struct {
	ID      string `db:"id" json:"-"`
	OrderID string `db:"order_id" json:"order_id"`
	Cents   int64  `db:"cents" json:"cents"`
}

const insertInvoice = `INSERT INTO invoices (id, order_id, cents) VALUES (:id, :order_id, :cents)`

// openSQLX opens sqlx on url with the database/sql driver named
// ("postgres" for lib/pq, "pgx" for pgx's stdlib), closed when t ends.
func openSQLX(t testing.TB, driver, url string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open(driver, url)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(3)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func invoiceOf(e core.Event) (invoice, error) {
	p, err := ormsuite.DecodePaid(e)
	return invoice{ID: e.ID.String(), OrderID: p.OrderID, Cents: p.Cents}, err
}

func sqlxDriver(driver string) ormsuite.Open {
	return func(t *testing.T, env *ormsuite.Env) ormsuite.Driver {
		db := openSQLX(t, driver, env.URL)
		return ormsuite.Driver{
			DB: db.DB,
			PlaceOrder: func(ctx context.Context, store *postgres.Store, o ormsuite.Order, events []core.Event, commit bool) error {
				tx, err := db.BeginTxx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
				if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id, total) VALUES (:id, :total)`, order{ID: o.ID, Total: o.Total}); err != nil {
					return err
				}
				if err := store.Add(ctx, postgres.SQL(tx), events...); err != nil {
					return err
				}
				if !commit {
					return tx.Rollback()
				}
				return tx.Commit()
			},
			// The Deduper's transaction is a *sql.Tx, not a *sqlx.Tx:
			// sqlx binds the named query, the *sql.Tx runs it.
			Invoice: func(fail func() error) core.Handler {
				return postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
					inv, err := invoiceOf(e)
					if err != nil {
						return err
					}
					query, args, err := db.BindNamed(insertInvoice, inv)
					if err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, query, args...); err != nil {
						return err
					}
					return fail()
				})
			},
			// Joining, the effect gets the caller's own *sqlx.Tx.
			JoinTx: func(ctx context.Context, d *postgres.Deduper, o ormsuite.Order, e core.Event, fail error, commit bool) (applied bool, onceErr, err error) {
				tx, err := db.BeginTxx(ctx, nil)
				if err != nil {
					return false, nil, err
				}
				defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
				if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id, total) VALUES (:id, :total)`, order{ID: o.ID, Total: o.Total}); err != nil {
					return false, nil, err
				}
				h := postgres.SQLEffect(func(ctx context.Context, tx *sqlx.Tx, e core.Event) error {
					inv, err := invoiceOf(e)
					if err != nil {
						return err
					}
					if _, err := tx.NamedExecContext(ctx, insertInvoice, inv); err != nil {
						return err
					}
					return fail
				})
				key := core.DedupeKey{Consumer: ormsuite.JoinConsumer, EventID: e.ID}
				applied, onceErr = d.OnceTx(ctx, postgres.SQL(tx), key, func(ctx context.Context) error { return h.Handle(ctx, e) })
				if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE orders SET total = ? WHERE id = ?`), 2*o.Total, o.ID); err != nil {
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

func TestSQLXLibPQ(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, sqlxDriver("postgres"))
}

func TestSQLXPgxStdlib(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, sqlxDriver("pgx"))
}

// An effect that asks for a *sqlx.Tx run by a Deduper on a *sql.DB (whose
// transaction is a *sql.Tx) fails and says why, writing nothing.
func TestSQLXEffectOfTheWrongKind(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	db := openSQLX(t, "postgres", env.URL)
	d, err := postgres.NewDeduper(db.DB, &postgres.DeduperConfig{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := postgres.SQLEffect(func(context.Context, *sqlx.Tx, core.Event) error {
		ran = true
		return nil
	})
	e := ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1})
	applied, err := core.ApplyOnce(ormsuite.Ctx(t), d, "c", h, e)
	if err == nil || applied || ran {
		t.Fatalf("applied %v, ran %v, err %v; want an error and no run", applied, ran, err)
	}
	if n := env.Count(t, "outbox_events_processed", "true"); n != 0 {
		t.Fatalf("%d processed records after the effect failed", n)
	}
	if errors.Is(err, postgres.ErrNoTx) {
		t.Fatalf("err %v: want the kinds named, not ErrNoTx", err)
	}
}
