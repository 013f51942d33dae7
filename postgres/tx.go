package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
)

// TxBeginner is what InTx needs: something that begins a transaction.
// *pgxpool.Pool and *pgx.Conn satisfy it (as they satisfy pgx.BeginFunc's
// parameter).
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in a transaction begun on db and commits it, like
// pgx.BeginFunc, then wakes the relays with Notify. It is the way to write
// events that works unchanged in every NotifyMode: with NotifyAfterCommit
// the notification follows the commit; in the other modes Notify does
// nothing.
//
//	err := store.InTx(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "UPDATE orders SET status = 'confirmed' WHERE id = $1", id); err != nil {
//			return err
//		}
//		return store.Add(ctx, tx, e)
//	})
//
// If fn returns an error, the transaction is rolled back, nothing is
// notified and fn's error is returned as it is. If fn panics, the
// transaction is rolled back and the panic continues. A failed BEGIN or
// COMMIT returns an error that wraps the driver's; no notification follows
// a failed COMMIT (should it have committed after all, polling finds the
// events).
//
// Pass a pool or a connection. Given a pgx.Tx, pgx runs fn in a savepoint,
// and the notification would precede the outer transaction's commit: a
// relay it wakes finds nothing yet, and the events wait for the poll. For
// transaction options (isolation level, read-only), use pgx.BeginTxFunc and
// call Notify after it succeeds.
func (s *Store) InTx(ctx context.Context, db TxBeginner, fn func(pgx.Tx) error) error {
	if db == nil {
		return &core.ConfigError{Field: "db", Reason: "is nil: pass the pool or connection to begin the transaction on"}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return wrap("begin transaction", err)
	}
	// Rolls back when fn fails or panics (the panic goes on); after a
	// commit it is a no-op.
	defer tx.Rollback(ctx) //nolint:errcheck // fn's error or the panic says more
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("commit transaction", err)
	}
	s.Notify()
	return nil
}
