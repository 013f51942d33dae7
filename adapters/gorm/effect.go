package outboxgorm

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// Effect adapts fn to a core.Handler whose writes commit with the
// Deduper's (or Sequencer's) record of the event: fn receives a *gorm.DB
// bound to that transaction, as db.Begin() would return one, with ctx as
// its context.
//
//	sqlDB, err := db.DB()
//	dedup, err := postgres.NewDeduper(sqlDB, nil)
//	mux.Register("order.paid", outboxgorm.Effect(db, func(ctx context.Context, tx *gorm.DB, e core.Event) error {
//		return tx.Create(&Invoice{ID: e.ID.String(), OrderID: e.AggregateID}).Error
//	}))
//
// Open the Deduper or Sequencer on db's *sql.DB (db.DB()). Run the handler
// through it (core.Idempotent, core.ApplyOnce, a receiver's Deduper), or
// inside Deduper.OnceTx given Tx(tx) of a transaction you hold, where fn's
// *gorm.DB runs in OnceTx's savepoint of it. Called any other way it fails
// with postgres.ErrNoTx instead of writing outside the transaction.
//
// db is the template: its configuration (logger, naming, hooks,
// PrepareStmt) carries over, its conditions do not. fn must not Commit or
// Rollback the *gorm.DB it receives; a nested tx.Transaction runs in a
// savepoint, as in any GORM transaction.
func Effect(db *gorm.DB, fn func(ctx context.Context, tx *gorm.DB, e core.Event) error) core.Handler {
	return postgres.SQLEffect(func(ctx context.Context, q postgres.SQLQuerier, e core.Event) error {
		tx, err := bind(ctx, db, q)
		if err != nil {
			return fmt.Errorf("event %s (%s): %w", e.ID, e.Type, err)
		}
		return fn(ctx, tx, e)
	})
}

// bind returns a new session of db whose statements run in q, the way
// db.Begin() binds its session to the *sql.Tx it began.
func bind(ctx context.Context, db *gorm.DB, q postgres.SQLQuerier) (*gorm.DB, error) {
	if db == nil {
		return nil, &core.ConfigError{Field: "db", Reason: "is nil: pass the *gorm.DB whose configuration the effect's transaction takes"}
	}
	pool, ok := q.(gorm.ConnPool)
	if !ok {
		return nil, fmt.Errorf("outboxgorm: the transaction is a %T, which GORM cannot run statements on (it has no PrepareContext or QueryRowContext)", q)
	}
	if ctx == nil {
		// A nil Context would leave the session sharing db's Statement,
		// and binding it would bind db itself.
		ctx = context.Background()
	}
	tx := db.Session(&gorm.Session{NewDB: true, Context: ctx})
	// With PrepareStmt, db.Begin() wraps the transaction so that its
	// statements use the prepared-statement cache: do the same.
	if ps, isPS := db.Statement.ConnPool.(*gorm.PreparedStmtDB); isPS {
		if t, isTx := pool.(gorm.Tx); isTx {
			pool = &gorm.PreparedStmtTX{Tx: t, PreparedStmtDB: ps}
		}
	}
	tx.Statement.ConnPool = pool
	return tx, nil
}
