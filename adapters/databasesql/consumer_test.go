package databasesql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// credit is an effect written with database/sql: it receives the
// Deduper's *sql.Tx.
func credit(f fixture, calls *atomic.Int64, fail error) core.Handler {
	return postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
		calls.Add(1)
		if _, err := tx.ExecContext(ctx, `INSERT INTO "`+f.schema+`".orders VALUES ($1, 1)`, e.ID.String()); err != nil {
			return err
		}
		return fail
	})
}

// A Deduper on a *sql.DB runs the effect in its *sql.Tx: applied once
// however often the event is delivered, and rolled back with its record
// when the effect fails.
func TestDeduperEffectInSQLTx(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, d)
			ctx := ctxT(t)
			dd, err := postgres.NewDeduper(f.db, &postgres.DeduperConfig{Schema: f.schema})
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			h := core.Idempotent(dd, "billing")(credit(f, &calls, nil))
			e := event(1)
			for range 3 {
				if err := h.Handle(ctx, e); err != nil {
					t.Fatalf("delivery: %v", err)
				}
			}
			if calls.Load() != 1 || f.count(t, "orders") != 1 || f.count(t, "outbox_events_processed") != 1 {
				t.Fatalf("3 deliveries: effect ran %d times, %d rows, %d records; want 1 each",
					calls.Load(), f.count(t, "orders"), f.count(t, "outbox_events_processed"))
			}

			boom := errors.New("boom")
			failing := core.Idempotent(dd, "billing")(credit(f, &calls, boom))
			if err := failing.Handle(ctx, event(2)); !errors.Is(err, boom) {
				t.Fatalf("failing effect = %v; want its error", err)
			}
			if f.count(t, "orders") != 1 || f.count(t, "outbox_events_processed") != 1 {
				t.Fatal("a failed effect left its row or its record")
			}
		})
	}
}

// OnceTx joins a transaction the caller holds: the effect's write, the
// record and the caller's own work commit together, and a duplicate
// leaves the caller's transaction usable.
func TestOnceTxJoinsCallersSQLTx(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, d)
			ctx := ctxT(t)
			dd, err := postgres.NewDeduper(f.db, &postgres.DeduperConfig{Schema: f.schema})
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			h := credit(f, &calls, nil)
			e := event(1)
			key := core.DedupeKey{Consumer: "billing", EventID: e.ID}
			run := func(tx *sql.Tx) bool {
				applied, err := dd.OnceTx(ctx, postgres.SQL(tx), key, func(ctx context.Context) error { return h.Handle(ctx, e) })
				if err != nil {
					t.Fatalf("OnceTx: %v", err)
				}
				return applied
			}

			// Rolled back: nothing stays, and the next delivery applies it.
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !run(tx) {
				t.Fatal("first OnceTx did not apply")
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if f.count(t, "orders") != 0 || f.count(t, "outbox_events_processed") != 0 {
				t.Fatal("a rolled-back caller's transaction kept the effect or its record")
			}

			tx, err = f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !run(tx) {
				t.Fatal("OnceTx after the rollback did not apply")
			}
			if run(tx) {
				t.Fatal("a second OnceTx in the same transaction applied again")
			}
			// The duplicate rolled back to its savepoint only: the caller
			// can go on and commit its own work.
			if _, err := tx.ExecContext(ctx, `INSERT INTO "`+f.schema+`".orders VALUES ('callers-own', 2)`); err != nil {
				t.Fatalf("caller's statement after the duplicate: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if f.count(t, "orders") != 2 || f.count(t, "outbox_events_processed") != 1 || calls.Load() != 2 {
				t.Fatalf("%d orders, %d records, %d calls; want 2, 1, 2", f.count(t, "orders"), f.count(t, "outbox_events_processed"), calls.Load())
			}
		})
	}
}

// SQLEffect refuses, with an error naming both, a transaction of another
// kind than it was written for, and one outside any Deduper.
func TestSQLEffectRefusesOtherTransactions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, drivers[0])
	ctx := ctxT(t)
	h := postgres.SQLEffect(func(ctx context.Context, conn *sql.Conn, e core.Event) error { return nil })
	if err := h.Handle(ctx, event(1)); !errors.Is(err, postgres.ErrNoTx) {
		t.Errorf("outside a Deduper: %v; want ErrNoTx", err)
	}
	dd, err := postgres.NewDeduper(f.db, &postgres.DeduperConfig{Schema: f.schema})
	if err != nil {
		t.Fatal(err)
	}
	err = core.Idempotent(dd, "billing")(h).Handle(ctx, event(2))
	if err == nil || !strings.Contains(err.Error(), "*sql.Conn") || !strings.Contains(err.Error(), "*sql.Tx") {
		t.Errorf("a *sql.Tx handed to a *sql.Conn effect: %v; want an error naming both", err)
	}
}

// An Inbox on a *sql.DB accepts deliveries in the caller's *sql.Tx and
// its worker applies them through database/sql.
func TestInboxOnSQLDB(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, d)
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			done := make(chan core.ID, 10)
			var calls atomic.Int64
			in, err := postgres.NewInbox(f.db, &postgres.InboxConfig{
				Consumer: "billing",
				Store:    postgres.Config{Schema: f.schema, Table: "inbox", Wakeup: postgres.WakeupPoll},
				Handler: postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
					calls.Add(1)
					if _, err := tx.ExecContext(ctx, `INSERT INTO "`+f.schema+`".orders VALUES ($1, 3)`, e.ID.String()); err != nil {
						return err
					}
					done <- e.ID
					return nil
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := postgres.Migrate(ctx, f.db, &postgres.MigrateConfig{Schema: f.schema, Table: "inbox"}); err != nil {
				t.Fatal(err)
			}
			evs := []core.Event{event(1), event(2)}
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			n, err := in.Accept(ctx, postgres.SQL(tx), evs...)
			if err != nil || n != 2 {
				t.Fatalf("Accept = %d, %v; want 2", n, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			runErr := make(chan error, 1)
			go func() { runErr <- in.Run(ctx) }()
			for range evs {
				select {
				case <-done:
				case err := <-runErr:
					t.Fatalf("inbox worker stopped: %v", err)
				case <-ctx.Done():
					t.Fatal("the inbox worker did not apply both deliveries")
				}
			}
			cancel()
			<-runErr
			if calls.Load() != 2 || f.count(t, "orders") != 2 {
				t.Fatalf("%d calls, %d rows; want 2 each", calls.Load(), f.count(t, "orders"))
			}
		})
	}
}
