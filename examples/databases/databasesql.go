package databases

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// OpenSQL runs everything of outboxkit on one *sql.DB: the migrations,
// the store (its writers' Add and its relay) and the deduper. A relay on
// this store polls; Config.WakeupURL gives it a wake-up connection.
func OpenSQL(ctx context.Context, db *sql.DB, schema string) (*postgres.Store, *postgres.Deduper, error) {
	if err := postgres.Migrate(ctx, db, &postgres.MigrateConfig{Schema: schema}); err != nil {
		return nil, nil, err
	}
	store, err := postgres.New(db, &postgres.Config{Schema: schema})
	if err != nil {
		return nil, nil, err
	}
	dedup, err := postgres.NewDeduper(db, &postgres.DeduperConfig{Schema: schema})
	return store, dedup, err
}

// PlaceOrderSQL writes an order and its event in one *sql.Tx.
func PlaceOrderSQL(ctx context.Context, db *sql.DB, store *postgres.Store, id string, cents int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit

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

// InvoiceSQL is a consumer's effect: run by a Deduper on a *sql.DB, it
// writes in the Deduper's *sql.Tx, so the invoice and the record that the
// event was applied commit together.
func InvoiceSQL() core.Handler {
	return postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
		var o OrderPlaced
		if err := json.Unmarshal(e.Payload, &o); err != nil {
			return core.Permanent(err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id, cents) VALUES ($1, $2)`, o.ID, o.Cents)
		return err
	})
}
