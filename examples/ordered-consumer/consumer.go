package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// tracking is the order-tracking service: its projection of each order's
// status (tracking) and the log of every status it applied, in the order it
// applied them (tracking_log), from which the run checks order afterwards.
type tracking struct {
	table, log string // quoted
}

func newTracking(schema string) *tracking {
	return &tracking{table: pgx.Identifier{schema, "tracking"}.Sanitize(), log: pgx.Identifier{schema, "tracking_log"}.Sanitize()}
}

// mux registers one typed handler per status. Each runs only when the
// Sequencer found its event next in order, inside the transaction that
// advances the order's last applied sequence.
func (t *tracking) mux() *core.Mux {
	m := core.NewMux()
	m.Register(typePlaced, core.Typed(func(ctx context.Context, e core.Event, p orderPlaced) error {
		return t.apply(ctx, e, p.OrderID, "placed",
			"INSERT INTO "+t.table+" (order_id, status, total_cents) VALUES ($1, 'placed', $2)", p.OrderID, p.TotalCents)
	}))
	m.Register(typePaid, core.Typed(func(ctx context.Context, e core.Event, p orderPaid) error {
		return t.apply(ctx, e, p.OrderID, "paid",
			"UPDATE "+t.table+" SET status = 'paid', paid_cents = $2 WHERE order_id = $1 AND status = 'placed'", p.OrderID, p.Cents)
	}))
	m.Register(typeShipped, core.Typed(func(ctx context.Context, e core.Event, p orderShipped) error {
		return t.apply(ctx, e, p.OrderID, "shipped",
			"UPDATE "+t.table+" SET status = 'shipped', carrier = $2 WHERE order_id = $1 AND status = 'paid'", p.OrderID, p.Carrier)
	}))
	m.Register(typeDelivered, core.Typed(func(ctx context.Context, e core.Event, p orderDelivered) error {
		return t.apply(ctx, e, p.OrderID, "delivered",
			"UPDATE "+t.table+" SET status = 'delivered' WHERE order_id = $1 AND status = 'shipped'", p.OrderID)
	}))
	return m
}

// errWrongStatus would mean an event was applied before its predecessor:
// the Sequencer exists so that it never happens.
var errWrongStatus = errors.New("order is not in the status this event follows")

// apply runs the status change and logs it, in the Sequencer's transaction.
func (t *tracking) apply(ctx context.Context, e core.Event, orderID int64, status, sql string, args ...any) error {
	tx, ok := postgres.TxFromContext(ctx)
	if !ok {
		return errors.New("no transaction in the context: the receiver's Deduper must be a postgres Deduper or Sequencer")
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Type, err)
	}
	if tag.RowsAffected() != 1 {
		// Transient, not Permanent: were it to happen, a later delivery
		// could find the predecessor applied.
		return fmt.Errorf("order %d → %s (sequence %d): %w", orderID, status, e.Sequence, errWrongStatus)
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+t.log+" (order_id, sequence, status) VALUES ($1, $2, $3)", orderID, e.Sequence, status)
	return err
}
