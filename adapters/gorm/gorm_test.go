package outboxgorm_test

import (
	"context"
	"errors"
	"testing"

	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	outboxgorm "github.com/outboxkit/outboxkit/adapters/gorm"
	"github.com/outboxkit/outboxkit/adapters/internal/ormsuite"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// openGORM opens GORM on url, closed when t ends.
func openGORM(t testing.TB, url string, prepare bool) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(gormpg.Open(url), &gorm.Config{
		PrepareStmt: prepare,
		Logger:      logger.Default.LogMode(logger.Silent),
	})
	if err != nil {
		t.Fatalf("open GORM: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(3)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// errRollback is what the tests return from db.Transaction to roll back.
var errRollback = errors.New("roll back")

func gormDriver(prepare bool) ormsuite.Open {
	return func(t *testing.T, env *ormsuite.Env) ormsuite.Driver {
		db := openGORM(t, env.URL, prepare)
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		invoice := func(fail func() error) core.Handler {
			return outboxgorm.Effect(db, func(ctx context.Context, tx *gorm.DB, e core.Event) error {
				p, err := ormsuite.DecodePaid(e)
				if err != nil {
					return err
				}
				if err := tx.Create(&Invoice{ID: e.ID.String(), OrderID: p.OrderID, Cents: p.Cents}).Error; err != nil {
					return err
				}
				return fail()
			})
		}
		return ormsuite.Driver{
			DB: sqlDB,
			PlaceOrder: func(ctx context.Context, store *postgres.Store, o ormsuite.Order, events []core.Event, commit bool) error {
				err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(&Order{ID: o.ID, Total: o.Total}).Error; err != nil {
						return err
					}
					if err := outboxgorm.Add(ctx, store, tx, events...); err != nil {
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
			Invoice: invoice,
			JoinTx: func(ctx context.Context, d *postgres.Deduper, o ormsuite.Order, e core.Event, fail error, commit bool) (applied bool, onceErr, err error) {
				err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(&Order{ID: o.ID, Total: o.Total}).Error; err != nil {
						return err
					}
					conn, err := outboxgorm.Tx(tx)
					if err != nil {
						return err
					}
					// The Effect handler, run inside OnceTx: its *gorm.DB is
					// bound to the savepoint of the caller's transaction.
					h := invoice(func() error { return fail })
					applied, onceErr = d.OnceTx(ctx, conn, core.DedupeKey{Consumer: ormsuite.JoinConsumer, EventID: e.ID}, func(ctx context.Context) error {
						return h.Handle(ctx, e)
					})
					if err := tx.Model(&Order{ID: o.ID}).Update("total", 2*o.Total).Error; err != nil {
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

func TestSuite(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, gormDriver(false))
}

// With PrepareStmt, GORM's transactions are *gorm.PreparedStmtTX and its
// pool a *gorm.PreparedStmtDB.
func TestSuitePrepareStmt(t *testing.T) {
	t.Parallel()
	ormsuite.Run(t, gormDriver(true))
}

func TestTxRefusesWhatIsNotATransaction(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	ctx := ormsuite.Ctx(t)
	db := openGORM(t, env.URL, false)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	store, err := postgres.New(sqlDB, &postgres.Config{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	e := ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o-1", Cents: 1})

	cases := map[string]*gorm.DB{
		"nil":                           nil,
		"the pool":                      db,
		"a session on the pool":         db.WithContext(ctx).Session(&gorm.Session{}),
		"the prepared-statement pool":   openGORM(t, env.URL, true),
		"a session with prepared stmts": db.Session(&gorm.Session{PrepareStmt: true}),
	}
	for name, tx := range cases {
		if _, err := outboxgorm.Tx(tx); !errors.Is(err, outboxgorm.ErrNotInTransaction) {
			t.Errorf("Tx(%s) = %v, want ErrNotInTransaction", name, err)
		}
		if err := outboxgorm.Add(ctx, store, tx, e); !errors.Is(err, outboxgorm.ErrNotInTransaction) {
			t.Errorf("Add through %s = %v, want ErrNotInTransaction", name, err)
		}
	}
	// db.Connection's *gorm.DB runs on one *sql.Conn: not a transaction.
	err = db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		return outboxgorm.Add(ctx, store, conn, e)
	})
	if !errors.Is(err, outboxgorm.ErrNotInTransaction) {
		t.Errorf("Add through db.Connection = %v, want ErrNotInTransaction", err)
	}
	if n := env.Count(t, "outbox_events", "true"); n != 0 {
		t.Fatalf("%d events written outside a transaction", n)
	}
}

func TestTxReportsAFailedBegin(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	db := openGORM(t, env.URL, false)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tx := db.WithContext(cancelled).Begin()
	if tx.Error == nil {
		tx.Rollback()
		t.Fatal("Begin with a cancelled context succeeded; the test needs it to fail")
	}
	_, err := outboxgorm.Tx(tx)
	if err == nil || !errors.Is(err, tx.Error) {
		t.Fatalf("Tx of a failed Begin = %v, want its error (%v)", err, tx.Error)
	}
}

// Tx returns the *sql.Tx under a *gorm.PreparedStmtTX, and that is the
// transaction begun: what goes through it commits and rolls back with it.
func TestTxUnwrapsPreparedStmtTX(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	ctx := ormsuite.Ctx(t)
	db := openGORM(t, env.URL, true)
	tx := db.WithContext(ctx).Begin()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	defer tx.Rollback()
	if _, ok := tx.Statement.ConnPool.(*gorm.PreparedStmtTX); !ok {
		t.Fatalf("GORM's transaction with PrepareStmt is a %T; the test expects *gorm.PreparedStmtTX", tx.Statement.ConnPool)
	}
	conn, err := outboxgorm.Tx(tx)
	if err != nil {
		t.Fatal(err)
	}
	ps := tx.Statement.ConnPool.(*gorm.PreparedStmtTX)
	if conn.Querier() != ps.Tx {
		t.Fatalf("Tx runs on %T, want the transaction under the PreparedStmtTX (%T)", conn.Querier(), ps.Tx)
	}
}

// Effect binds a session of its template to the Deduper's transaction:
// the template stays on the pool, and keeps PrepareStmt.
func TestEffectLeavesItsTemplateOnThePool(t *testing.T) {
	t.Parallel()
	env := ormsuite.NewEnv(t)
	ctx := ormsuite.Ctx(t)
	if _, err := env.Pool.Exec(ctx, "INSERT INTO "+env.Schema+".orders (id, total) VALUES ('pre', 0)"); err != nil {
		t.Fatal(err)
	}
	for _, prepare := range []bool{false, true} {
		db := openGORM(t, env.URL, prepare)
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		before := db.Statement.ConnPool
		d, err := postgres.NewDeduper(sqlDB, &postgres.DeduperConfig{Schema: env.Schema})
		if err != nil {
			t.Fatal(err)
		}
		var inTx gorm.ConnPool
		h := outboxgorm.Effect(db.Where("id = ?", "a condition the effect must not inherit"), func(ctx context.Context, tx *gorm.DB, e core.Event) error {
			inTx = tx.Statement.ConnPool
			var n int64
			// With the template's condition too, it would count nothing.
			if err := tx.Model(&Order{}).Where("id = ?", "pre").Count(&n).Error; err != nil {
				return err
			}
			return tx.Create(&Order{ID: e.ID.String(), Total: n}).Error
		})
		e := ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1})
		if applied, err := core.ApplyOnce(ctx, d, "c", h, e); err != nil || !applied {
			t.Fatalf("PrepareStmt %v: applied %v, err %v", prepare, applied, err)
		}
		if db.Statement.ConnPool != before {
			t.Fatalf("PrepareStmt %v: the template's pool became a %T", prepare, db.Statement.ConnPool)
		}
		_, isPS := inTx.(*gorm.PreparedStmtTX)
		if isPS != prepare {
			t.Fatalf("PrepareStmt %v: the effect's transaction is a %T", prepare, inTx)
		}
		if n := env.Count(t, "orders", "id = $1 AND total = 1", e.ID.String()); n != 1 {
			t.Fatalf("PrepareStmt %v: the effect's order rows = %d, want 1", prepare, n)
		}
	}
}

func TestEffectOutsideADeduperFails(t *testing.T) {
	t.Parallel()
	ran := false
	h := outboxgorm.Effect(&gorm.DB{}, func(context.Context, *gorm.DB, core.Event) error {
		ran = true
		return nil
	})
	err := h.Handle(context.Background(), ormsuite.PaidEvent(t, ormsuite.Paid{OrderID: "o", Cents: 1}))
	if !errors.Is(err, postgres.ErrNoTx) || ran {
		t.Fatalf("Handle outside a Deduper: err %v, ran %v; want ErrNoTx and no run", err, ran)
	}
}
