package databases

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// PlaceOrderSQLX writes an order and its event in one *sqlx.Tx. The
// store is opened on the *sql.DB inside it: postgres.New(db.DB, nil).
func PlaceOrderSQLX(ctx context.Context, db *sqlx.DB, store *postgres.Store, id string, cents int64) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit

	if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id, cents) VALUES (:id, :cents)`, OrderPlaced{ID: id, Cents: cents}); err != nil {
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

// ApplyInSQLX applies an event inside a *sqlx.Tx the caller holds: OnceTx
// records it in a savepoint of tx and runs the effect there; a duplicate
// rolls back to the savepoint and leaves the rest of tx to commit.
func ApplyInSQLX(ctx context.Context, tx *sqlx.Tx, dedup *postgres.Deduper, e core.Event, o OrderPlaced) (bool, error) {
	key := core.DedupeKey{Consumer: "invoicing", EventID: e.ID}
	return dedup.OnceTx(ctx, postgres.SQL(tx), key, func(ctx context.Context) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id, cents) VALUES ($1, $2)`, o.ID, o.Cents)
		return err
	})
}
