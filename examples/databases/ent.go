package databases

import (
	"context"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// PlaceOrderEnt writes an order and its event in one transaction of ent's
// SQL driver (drv := entsql.OpenDB(dialect.Postgres, db), on your
// *sql.DB): its *entsql.Tx has ExecContext and QueryContext, so
// postgres.SQL takes it as it is.
func PlaceOrderEnt(ctx context.Context, drv *entsql.Driver, store *postgres.Store, id string, cents int64) error {
	dtx, err := drv.Tx(ctx)
	if err != nil {
		return err
	}
	tx := dtx.(*entsql.Tx)
	defer tx.Rollback() // after Commit: an error nobody reads

	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents) VALUES ($1, $2)`, id, cents); err != nil {
		return err
	}
	e, err := core.NewEvent("order.placed", OrderPlaced{ID: id, Cents: cents})
	if err != nil {
		return err
	}
	if err := store.Add(ctx, postgres.SQL(tx), e); err != nil {
		return err
	}
	return tx.Commit()
}
