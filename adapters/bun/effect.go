package outboxbun

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// Effect adapts fn to a core.Handler whose writes commit with the
// Deduper's (or Sequencer's) record of the event. fn receives that
// transaction as a bun.IConn, the *sql.Tx itself: build the queries on
// your *bun.DB and run them in it with Conn, as bun runs any query on a
// connection of your choosing.
//
//	dedup, err := postgres.NewDeduper(db.DB, nil) // db is the *bun.DB
//	mux.Register("order.paid", outboxbun.Effect(func(ctx context.Context, tx bun.IConn, e core.Event) error {
//		_, err := db.NewInsert().Conn(tx).Model(&Invoice{ID: e.ID.String()}).Exec(ctx)
//		return err
//	}))
//
// A query built on db without Conn(tx) runs outside the transaction, on
// its own: every write of the effect needs Conn(tx). tx is not a bun.Tx
// (bun cannot wrap a transaction it did not begin), so tx.ExecContext does
// not format bun's ? placeholders: write $1, or use db.NewRaw(query,
// args...).Conn(tx). Bun's query hooks see the queries built on db, not
// the Deduper's BEGIN and COMMIT.
//
// Open the Deduper or Sequencer on db.DB. Run the handler through it
// (core.Idempotent, core.ApplyOnce, a receiver's Deduper), or inside
// Deduper.OnceTx given Tx(tx) of a bun.Tx you hold, where tx is that
// transaction's *sql.Tx and fn's writes land in OnceTx's savepoint; there
// you may as well write through your bun.Tx directly. Called any other way
// it fails with postgres.ErrNoTx instead of writing outside the
// transaction.
func Effect(fn func(ctx context.Context, tx bun.IConn, e core.Event) error) core.Handler {
	return postgres.SQLEffect(fn)
}
