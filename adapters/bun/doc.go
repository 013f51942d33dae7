// Package outboxbun puts outboxkit in bun's transactions: events written
// in the bun.Tx of the business change, and consumers whose effects,
// written with bun, commit with the record that they were applied.
//
// It is a module of its own, so that services on pgx alone do not pull in
// bun. It works with bun's pgdriver and with pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib) under pgdialect.
//
// # Writing events
//
// Add writes through a bun.Tx (of db.RunInTx or db.BeginTx), so the events
// commit or roll back with it:
//
//	store, err := postgres.New(db.DB, &postgres.Config{}) // db is the *bun.DB
//
//	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		if _, err := tx.NewInsert().Model(&Order{ID: id, Total: total}).Exec(ctx); err != nil {
//			return err
//		}
//		e, err := core.NewEvent("order.placed", OrderPlaced{ID: id, Total: total})
//		if err != nil {
//			return err
//		}
//		return outboxbun.Add(ctx, store, tx, e)
//	})
//
// Tx gives the same transaction to anything else of outboxkit that takes
// one (Deduper.OnceTx, Sequencer.OnceInOrderTx, Inbox.Accept, the Watermill
// transactional publisher's Adder). It runs outboxkit's statements on the
// *sql.Tx under the bun.Tx: bun.Tx's own ExecContext would rewrite their
// $1 parameters.
//
// # Consuming events
//
// Open the Deduper (or Sequencer) on the *bun.DB's *sql.DB, and write the
// effect with Effect: it receives the Deduper's transaction as a
// bun.IConn, on which bun runs any query given Conn(tx), so the effect and
// the record of the event commit together, or not at all.
//
//	dedup, err := postgres.NewDeduper(db.DB, nil)
//	mux.Register("order.paid", outboxbun.Effect(func(ctx context.Context, tx bun.IConn, e core.Event) error {
//		_, err := db.NewInsert().Conn(tx).Model(&Invoice{EventID: e.ID.String(), OrderID: e.AggregateID}).Exec(ctx)
//		return err
//	}))
//
// Every write of the effect needs Conn(tx): a query without it runs on the
// pool, outside the transaction.
//
// To apply an event inside a bun.Tx you hold, join it with Deduper.OnceTx:
// the effect runs in a savepoint, writes through your bun.Tx as usual, and
// a duplicate or a failed effect leaves the rest of the transaction to
// commit.
//
//	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		key := core.DedupeKey{Consumer: "invoicing", EventID: e.ID}
//		_, err := dedup.OnceTx(ctx, outboxbun.Tx(tx), key, func(ctx context.Context) error {
//			_, err := tx.NewInsert().Model(&Invoice{EventID: e.ID.String(), OrderID: e.AggregateID}).Exec(ctx)
//			return err
//		})
//		return err
//	})
package outboxbun
