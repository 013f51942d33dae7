package postgres

import (
	"context"
	"fmt"

	"github.com/outboxkit/outboxkit/core"
)

// SQLTxFromContext is TxFromContext for effects written with database/sql:
// it returns the database/sql handle of the transaction a Deduper or
// Sequencer runs an effect in. For a Deduper on a *sql.DB that is the
// *sql.Tx it began; for OnceTx and OnceInOrderTx given SQL(q), it is q
// (whose savepoint the effect runs in).
//
// It returns false when the effect does not run in a database/sql
// transaction: outside a Deduper, or in one on a *pgxpool.Pool (use
// TxFromContext there).
func SQLTxFromContext(ctx context.Context) (SQLQuerier, bool) {
	tx, ok := TxFromContext(ctx)
	if !ok {
		return nil, false
	}
	c, ok := tx.(*SQLConn)
	if !ok {
		return nil, false
	}
	return c.q, true
}

// SQLEffect is Effect for database/sql: it adapts a function that writes
// through the Deduper's transaction, as the caller's kind of handle T, to
// a core.Handler. T is *sql.Tx for a Deduper or Sequencer on a *sql.DB,
// or the type of the handle given to OnceTx through SQL (a *sqlx.Tx,
// say).
//
//	h := postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
//		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 10 WHERE id = $1", e.AggregateID)
//		return err
//	})
//
// Run the handler through the Deduper (core.Idempotent, core.ApplyOnce);
// called any other way it fails with ErrNoTx instead of writing outside
// the transaction. If the transaction is of another kind than T, it fails
// with an error that names both.
func SQLEffect[T SQLQuerier](fn func(ctx context.Context, tx T, e core.Event) error) core.Handler {
	return core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		q, ok := SQLTxFromContext(ctx)
		if !ok {
			if _, pgxTx := TxFromContext(ctx); pgxTx {
				return fmt.Errorf("event %s (%s): the effect runs in a pgx transaction (the Deduper is on a *pgxpool.Pool): use postgres.Effect, or open the Deduper on a *sql.DB", e.ID, e.Type)
			}
			return fmt.Errorf("event %s (%s): %w", e.ID, e.Type, ErrNoTx)
		}
		tx, ok := q.(T)
		if !ok {
			var want T
			return fmt.Errorf("event %s (%s): the effect wants a %T, but the transaction is a %T", e.ID, e.Type, want, q)
		}
		return fn(ctx, tx, e)
	})
}
