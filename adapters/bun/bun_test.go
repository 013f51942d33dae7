package outboxbun_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	outboxbun "github.com/outboxkit/outboxkit/adapters/bun"
	"github.com/outboxkit/outboxkit/adapters/internal/ormsuite"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// openBun opens bun on url with the driver named ("pg" for bun's
// pgdriver, "pgx" for pgx's stdlib), closed when t ends.
func openBun(t testing.TB, driver, url string) *bun.DB {
	t.Helper()
	var sqlDB *sql.DB
	switch driver {
	case "pg":
		sqlDB = sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(url)))
	case "pgx":
		var err error
		if sqlDB, err = sql.Open("pgx", url); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("no driver %q", driver)
	}
	sqlDB.SetMaxOpenConns(3)
	db := bun.NewDB(sqlDB, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// errRollback is what the tests return from RunInTx to roll back.
var errRollback = errors.New("roll back")

func bunDriver(driver string) ormsuite.Open {
	return func(t *testing.T, env *ormsuite.Env) ormsuite.Driver {
		db := openBun(t, driver, env.URL)
		return ormsuite.Driver{
			DB: db.DB,
			PlaceOrder: func(ctx context.Context, store *postgres.Store, o ormsuite.Order, events []core.Event, commit bool) error {
				err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					if _, err := tx.NewInsert().Model(&Order{ID: o.ID, Total: o.Total}).Exec(ctx); err != nil {
						return err
					}
					if err := outboxbun.Add(ctx, store, tx, events...); err != nil {
						return err
					}
					if !commit {
						return errRollback
					}
					return nil
				})
				if errors.Is(err, errRollback) {
					return nil
				}
				return err
			},
			Invoice: func(fail func() error) core.Handler {
				return outboxbun.Effect(func(ctx context.Context, tx bun.IConn, e core.Event) error {
					p, err := ormsuite.DecodePaid(e)
					if err != nil {
						return err
					}
					inv := &Invoice{ID: e.ID.String(), OrderID: p.OrderID, Cents: p.Cents}
					if _, err := db.NewInsert().Conn(tx).Model(inv).Exec(ctx); err != nil {
						return err
					}
					return fail()
				})
			},
			JoinTx: func(ctx context.Context, d *postgres.Deduper, o ormsuite.Order, e core.Event, fail error, commit bool) (applied bool, onceErr, err error) {
				err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					if _, err := tx.NewInsert().Model(&Order{ID: o.ID, Total: o.Total}).Exec(ctx); err != nil {
						return err
					}
					key := core.DedupeKey{Consumer: ormsuite.JoinConsumer, EventID: e.ID}
					applied, onceErr = d.OnceTx(ctx, outboxbun.Tx(tx), key, func(ctx context.Context) error {
						p, err := ormsuite.DecodePaid(e)
						if err != nil {
							return err
						}
						if _, err := tx.NewInsert().Model(&Invoice{ID: e.ID.String(), OrderID: p.OrderID, Cents: p.Cents}).Exec(ctx); err != nil {
							return err
						}
						return fail
					})
					if _, err := tx.NewUpdate().Model(&Order{ID: o.ID, Total: 2 * o.Total}).Column("total").WherePK().Exec(ctx); err != nil {
						return err
					}
					if !commit {
						return errRollback
					}
					return nil
				})
				if errors.Is(err, errRollback) {
					err = nil
				}
				return applied, onceErr, err
			},
		}
	}
}

// Bun's own driver.
func TestSuitePgdriver(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, bunDriver("pg"))
}

// pgx's database/sql driver under bun.
func TestSuitePgxStdlib(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, bunDriver("pgx"))
}

// A relay's Store on bun's pgdriver. pgdriver interpolates the arguments
// into the SQL text, so the claim's floor position math.MinInt64, were it
// sent as an int64, would arrive as -9223372036854775808::int8, which
// PostgreSQL reads as -(9223372036854775808::int8): "bigint out of range"
// (SQLSTATE 22003), and every claim failed. The database/sql seam
// (postgres/sqlargs.go) sends numbers in their text form, which pgdriver
// quotes.
func TestPgdriverStoreClaims(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	ctx := ormsuite.Ctx(t)
	db := openBun(t, "pg", env.URL)
	store, err := postgres.New(db.DB, &postgres.Config{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	e := ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1})
	if err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return outboxbun.Add(ctx, store, tx, e)
	}); err != nil {
		t.Fatal(err)
	}
	b, err := store.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("claim on pgdriver: %v", err)
	}
	if len(b.Events) != 1 || b.Events[0].ID != e.ID {
		t.Fatalf("claimed %v, want the event %s", b.Events, e.ID)
	}
}

// Events added in a savepoint (a bun.Tx's own RunInTx) roll back with it,
// and the enclosing transaction still commits its own.
func TestAddInASavepointGoesWithIt(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"pg", "pgx"} {
		env := ormsuite.NewEnv(t)
		ctx := ormsuite.Ctx(t)
		db := openBun(t, driver, env.URL)
		store, err := postgres.New(db.DB, &postgres.Config{Schema: env.Schema})
		if err != nil {
			t.Fatal(err)
		}
		kept := ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o-1", Cents: 1})
		dropped := ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o-1", Cents: 2})
		err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if err := outboxbun.Add(ctx, store, tx, kept); err != nil {
				return err
			}
			err := tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
				if err := outboxbun.Add(ctx, store, sp, dropped); err != nil {
					return err
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", driver, err)
		}
		if n := env.Count(t, "outbox_events", "id = $1", kept.ID.String()); n != 1 {
			t.Fatalf("%s: the enclosing transaction's event rows = %d, want 1", driver, n)
		}
		if n := env.Count(t, "outbox_events", "id = $1", dropped.ID.String()); n != 0 {
			t.Fatalf("%s: the rolled-back savepoint's event rows = %d, want 0", driver, n)
		}
	}
}

// Tx runs on the *sql.Tx because the bun.Tx itself would not do: its
// ExecContext formats the query for bun's ? placeholders and sends it
// without arguments. If this test starts failing, bun changed and Tx's
// comment is out of date.
func TestTheBunTxItselfLosesTheArguments(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	ctx := ormsuite.Ctx(t)
	db := openBun(t, "pgx", env.URL)
	store, err := postgres.New(db.DB, &postgres.Config{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // the test only reads
	if err := store.Add(ctx, postgres.SQL(tx), ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1})); err == nil {
		t.Fatal("Add through the bun.Tx itself succeeded: bun no longer rewrites the arguments away, and outboxbun.Tx's comment is out of date")
	}
}

func TestAddRefusesTheZeroTx(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	db := openBun(t, "pgx", env.URL)
	store, err := postgres.New(db.DB, &postgres.Config{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	var ce *core.ConfigError
	err = outboxbun.Add(ormsuite.Ctx(t), store, bun.Tx{}, ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1}))
	if !errors.As(err, &ce) || ce.Field != "tx" {
		t.Fatalf("Add with the zero bun.Tx = %v, want a ConfigError on tx", err)
	}
}

// Inside OnceTx, Effect's tx is the *sql.Tx of the caller's bun.Tx.
func TestEffectInOnceTxGetsTheCallersSQLTx(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	ctx := ormsuite.Ctx(t)
	db := openBun(t, "pg", env.URL)
	d, err := postgres.NewDeduper(db.DB, &postgres.DeduperConfig{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	var got bun.IConn
	h := outboxbun.Effect(func(ctx context.Context, tx bun.IConn, e core.Event) error {
		got = tx
		return nil
	})
	e := ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1})
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := d.OnceTx(ctx, outboxbun.Tx(tx), core.DedupeKey{Consumer: "c", EventID: e.ID}, func(ctx context.Context) error {
			return h.Handle(ctx, e)
		})
		if err == nil && got != bun.IConn(tx.Tx) {
			t.Errorf("the effect's transaction is %T %p, want the caller's *sql.Tx %p", got, got, tx.Tx)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEffectOutsideADeduperFails(t *testing.T) {
	t.Parallel()
	ran := false
	h := outboxbun.Effect(func(context.Context, bun.IConn, core.Event) error {
		ran = true
		return nil
	})
	err := h.Handle(context.Background(), ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1}))
	if !errors.Is(err, postgres.ErrNoTx) || ran {
		t.Fatalf("Handle outside a Deduper: err %v, ran %v; want ErrNoTx and no run", err, ran)
	}
}
