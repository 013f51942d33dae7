package outboxbun

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// Tx returns tx's database/sql transaction seen as the pgx.Tx outboxkit's
// methods take: pass it to Store.Add, Deduper.OnceTx,
// Sequencer.OnceInOrderTx or Inbox.Accept, and what they write commits or
// rolls back with the rest of tx. A bun.Tx that stands for a savepoint
// (tx.BeginTx or tx.RunInTx inside a transaction) gives the transaction it
// belongs to: the savepoint is connection state, so statements run through
// the *sql.Tx still land in it.
//
// It runs on tx.Tx, the *sql.Tx, not on tx itself: bun.Tx's ExecContext
// formats the query with bun's own placeholders (?) and sends it with no
// arguments, which would leave outboxkit's $1 parameters unbound. Bun's
// query hooks therefore do not see outboxkit's statements.
//
// tx must come from bun (db.BeginTx, db.RunInTx); the zero bun.Tx has no
// transaction, and Add refuses it.
func Tx(tx bun.Tx) *postgres.SQLConn { return postgres.SQL(tx.Tx) }

// Add writes events to store's outbox in tx: Tx, then store.Add. The
// events commit or roll back with tx.
//
//	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		if _, err := tx.NewInsert().Model(&order).Exec(ctx); err != nil {
//			return err
//		}
//		return outboxbun.Add(ctx, store, tx, e)
//	})
//
// Like any failed statement, a failed Add aborts the transaction: return
// its error so bun rolls back.
func Add(ctx context.Context, store *postgres.Store, tx bun.Tx, events ...core.Event) error {
	if store == nil {
		return &core.ConfigError{Field: "store", Reason: "is nil: pass the *postgres.Store to write to"}
	}
	if tx.Tx == nil {
		return &core.ConfigError{Field: "tx", Reason: "is the zero bun.Tx: pass the transaction of db.BeginTx or db.RunInTx"}
	}
	return store.Add(ctx, Tx(tx), events...)
}
