package outboxgorm

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// ErrNotInTransaction is what Tx and Add return for a *gorm.DB that is not
// inside a transaction: events written through it would commit on their
// own, whatever became of the business change.
var ErrNotInTransaction = errors.New("outboxgorm: the *gorm.DB is not inside a transaction: pass the tx of db.Transaction(func(tx *gorm.DB) error { ... }) or of db.Begin()")

// Tx returns the database/sql transaction tx runs in, seen as the pgx.Tx
// outboxkit's methods take: pass it to Store.Add, Deduper.OnceTx,
// Sequencer.OnceInOrderTx or Inbox.Accept, and what they write commits or
// rolls back with the rest of tx.
//
// tx must be inside a transaction (the *gorm.DB of db.Transaction's
// callback, or what db.Begin returned); a *gorm.DB on the pool, or on a
// *sql.Conn, fails with an error matching ErrNotInTransaction rather than
// letting the events commit on their own. A tx that carries an error (a
// failed Begin, say) fails with that error.
//
// With PrepareStmt, the transaction is a *gorm.PreparedStmtTX: Tx returns
// the transaction under it, so outboxkit's statements run as they are
// rather than through GORM's statement cache.
func Tx(tx *gorm.DB) (*postgres.SQLConn, error) {
	if tx == nil || tx.Statement == nil {
		return nil, fmt.Errorf("%w (it is nil)", ErrNotInTransaction)
	}
	if tx.Error != nil {
		return nil, fmt.Errorf("outboxgorm: the *gorm.DB carries an error: %w", tx.Error)
	}
	q, err := txOf(tx.Statement.ConnPool)
	if err != nil {
		return nil, err
	}
	return postgres.SQL(q), nil
}

// txOf returns the transaction a GORM connection pool stands for. GORM
// itself tells a transaction by gorm.TxCommitter (its Commit and Rollback
// require one), so the same test decides here.
func txOf(p gorm.ConnPool) (postgres.SQLQuerier, error) {
	if isNil(p) {
		return nil, fmt.Errorf("%w (its connection pool is nil)", ErrNotInTransaction)
	}
	if ps, ok := p.(*gorm.PreparedStmtTX); ok {
		if isNil(ps.Tx) {
			return nil, fmt.Errorf("%w (its prepared-statement transaction has no transaction under it)", ErrNotInTransaction)
		}
		// Not ps itself: it would prepare and cache outboxkit's statements
		// on the pool, which a pooler in transaction mode cannot follow.
		return ps.Tx, nil
	}
	if _, ok := p.(gorm.TxCommitter); ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w (its connection pool is a %T)", ErrNotInTransaction, p)
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// as GORM leaves Statement.ConnPool after a failed Begin.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Add writes events to store's outbox in tx's transaction: Tx, then
// store.Add. The events commit or roll back with tx.
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		if err := tx.Create(&order).Error; err != nil {
//			return err
//		}
//		return outboxgorm.Add(ctx, store, tx, e)
//	})
//
// Like any failed statement, a failed Add aborts the transaction: return
// its error so GORM rolls back.
func Add(ctx context.Context, store *postgres.Store, tx *gorm.DB, events ...core.Event) error {
	if store == nil {
		return &core.ConfigError{Field: "store", Reason: "is nil: pass the *postgres.Store to write to"}
	}
	c, err := Tx(tx)
	if err != nil {
		return err
	}
	return store.Add(ctx, c, events...)
}
