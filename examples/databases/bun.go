package databases

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// PlaceOrderBun writes an order and its event in one bun transaction:
// bun.Tx holds the *sql.Tx in its Tx field. The store is on bun's
// *sql.DB: postgres.New(db.DB, nil).
func PlaceOrderBun(ctx context.Context, db *bun.DB, store *postgres.Store, id string, cents int64) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&Order{ID: id, Cents: cents}).Exec(ctx); err != nil {
			return err
		}
		e, err := core.NewEvent("order.placed", OrderPlaced{ID: id, Cents: cents})
		if err != nil {
			return err
		}
		return store.Add(ctx, postgres.SQL(tx.Tx), e)
	})
}
