package ormsuite

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// Consumer names the effect the suite applies through a Deduper or a
// Sequencer; JoinConsumer the one applied with OnceTx.
const (
	Consumer     = "invoicing"
	JoinConsumer = "invoicing-joined"
)

// Driver is what an ORM's test gives the suite: its *sql.DB and the three
// pieces of code a service on that ORM writes.
type Driver struct {
	// DB is the *sql.DB the ORM runs on (GORM's db.DB(), bun.DB's DB,
	// sqlx.DB's DB, the one given to ent's entsql.OpenDB). The suite opens
	// its Store, Deduper and Sequencer on it.
	DB *sql.DB

	// PlaceOrder, in one transaction begun by the ORM, inserts o with the
	// ORM and writes events with store.Add through the adapter's seam,
	// then commits when commit is true and rolls back otherwise (the way
	// the ORM's users do: an error returned from its transaction callback,
	// say). It returns any error but the one it made up to roll back.
	PlaceOrder func(ctx context.Context, store *postgres.Store, o Order, events []core.Event, commit bool) error

	// Invoice returns the handler of "order.paid" events: it decodes the
	// payload (DecodePaid), inserts the invoice (id: the event's ID) with
	// the ORM through the transaction the Deduper or Sequencer hands it,
	// then returns fail().
	Invoice func(fail func() error) core.Handler

	// JoinTx, in one transaction begun by the ORM, inserts o with the ORM;
	// joins the transaction with d.OnceTx through the adapter's seam (key:
	// JoinConsumer and e.ID), the effect inserting e's invoice with the ORM
	// through the caller's transaction and then returning fail; whatever
	// OnceTx returned, updates o's total to 2*o.Total with the ORM (the
	// transaction must still be usable); then commits when commit is true
	// and rolls back otherwise. It returns what OnceTx returned and, apart,
	// any other error.
	JoinTx func(ctx context.Context, d *postgres.Deduper, o Order, e core.Event, fail error, commit bool) (applied bool, onceErr, err error)
}

// Open makes the Driver of an ORM on env: it opens the ORM on env.URL
// and closes it when t ends.
type Open func(t *testing.T, env *Env) Driver

// Run runs the scenario against the ORM open returns, each part in a
// fresh schema.
func Run(t *testing.T, open Open) {
	parts := []struct {
		name string
		fn   func(t *testing.T, env *Env, drv Driver)
	}{
		{"CommitRelaysTheEvents", commitRelays},
		{"RollbackLeavesNothing", rollbackLeavesNothing},
		{"DeduperAppliesOnce", deduperAppliesOnce},
		{"SequencerAppliesInOrder", sequencerAppliesInOrder},
		{"OnceTxJoinsTheCallersTransaction", joinCallersTx},
	}
	for _, p := range parts {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			env := NewEnv(t)
			p.fn(t, env, open(t, env))
		})
	}
}

var errBoom = errors.New("ormsuite: the effect failed")

// drain relays every due event of store to a memory publisher and returns
// what it published.
func drain(t *testing.T, store *postgres.Store) []core.Event {
	t.Helper()
	pub := memory.NewPublisher()
	relay, err := core.NewRelay(store, pub, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Drain(Ctx(t)); err != nil {
		t.Fatalf("drain the outbox: %v", err)
	}
	return pub.Published()
}

func twoEvents(t *testing.T, orderID string) []core.Event {
	return []core.Event{
		PaidEvent(t, Paid{OrderID: orderID, Cents: 1250}),
		PaidEvent(t, Paid{OrderID: orderID, Cents: 99}),
	}
}

func commitRelays(t *testing.T, env *Env, drv Driver) {
	ctx := Ctx(t)
	store := env.Store(t, drv)
	evs := twoEvents(t, "o-1")
	if err := drv.PlaceOrder(ctx, store, Order{ID: "o-1", Total: 1349}, evs, true); err != nil {
		t.Fatalf("place the order: %v", err)
	}
	if n := env.Count(t, "orders", "id = 'o-1' AND total = 1349"); n != 1 {
		t.Fatalf("committed order rows = %d, want 1", n)
	}
	published := drain(t, store)
	if len(published) != len(evs) {
		t.Fatalf("relayed %d events, want %d: %v", len(published), len(evs), published)
	}
	byID := map[core.ID]core.Event{}
	for _, e := range published {
		byID[e.ID] = e
	}
	for _, want := range evs {
		got, ok := byID[want.ID]
		if !ok {
			t.Fatalf("event %s was not relayed (relayed: %v)", want.ID, published)
		}
		p, err := DecodePaid(got)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := DecodePaid(want)
		if got.Type != want.Type || p != w {
			t.Fatalf("relayed %s %+v, want %s %+v", got.Type, p, want.Type, w)
		}
	}
	if n := env.Count(t, "outbox_events", "published_at IS NULL"); n != 0 {
		t.Fatalf("%d events still pending after the relay drained the outbox", n)
	}
}

func rollbackLeavesNothing(t *testing.T, env *Env, drv Driver) {
	ctx := Ctx(t)
	store := env.Store(t, drv)
	if err := drv.PlaceOrder(ctx, store, Order{ID: "o-2", Total: 10}, twoEvents(t, "o-2"), false); err != nil {
		t.Fatalf("place the order (rolled back): %v", err)
	}
	if n := env.Count(t, "orders", "true"); n != 0 {
		t.Fatalf("order rows after a rollback = %d, want 0", n)
	}
	if n := env.Count(t, "outbox_events", "true"); n != 0 {
		t.Fatalf("outbox rows after a rollback = %d, want 0", n)
	}
	if published := drain(t, store); len(published) != 0 {
		t.Fatalf("relayed %d events of a rolled-back transaction: %v", len(published), published)
	}
	// The handle is still good: the next transaction commits.
	if err := drv.PlaceOrder(ctx, store, Order{ID: "o-3", Total: 10}, twoEvents(t, "o-3"), true); err != nil {
		t.Fatalf("place an order after the rollback: %v", err)
	}
	if n := env.Count(t, "outbox_events", "true"); n != 2 {
		t.Fatalf("outbox rows after the next commit = %d, want 2", n)
	}
}

// failing counts the effect's runs and fails the first ones.
type failing struct {
	runs     atomic.Int64
	failures int64
}

func (f *failing) fail() error {
	if f.runs.Add(1) <= f.failures {
		return errBoom
	}
	return nil
}

func deduperAppliesOnce(t *testing.T, env *Env, drv Driver) {
	ctx := Ctx(t)
	d, err := postgres.NewDeduper(drv.DB, &postgres.DeduperConfig{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	f := &failing{failures: 1}
	h := drv.Invoice(f.fail)
	e := PaidEvent(t, Paid{OrderID: "o-4", Cents: 700})
	invoices := func() int64 {
		return env.Count(t, "invoices", "id = $1 AND order_id = 'o-4' AND cents = 700", e.ID.String())
	}
	records := func() int64 {
		return env.Count(t, "outbox_events_processed", "consumer = $1 AND event_id = $2", Consumer, e.ID.String())
	}

	applied, err := core.ApplyOnce(ctx, d, Consumer, h, e)
	if !errors.Is(err, errBoom) || applied {
		t.Fatalf("failing effect: applied %v, err %v; want false and the effect's error", applied, err)
	}
	if n, r := invoices(), records(); n != 0 || r != 0 {
		t.Fatalf("after a failed effect: %d invoices, %d processed records; want both rolled back", n, r)
	}

	applied, err = core.ApplyOnce(ctx, d, Consumer, h, e)
	if err != nil || !applied {
		t.Fatalf("redelivery after the failure: applied %v, err %v; want true, nil", applied, err)
	}
	if n, r := invoices(), records(); n != 1 || r != 1 {
		t.Fatalf("after the effect committed: %d invoices, %d processed records; want 1 and 1", n, r)
	}

	for i := range 2 {
		applied, err = core.ApplyOnce(ctx, d, Consumer, h, e)
		if err != nil || applied {
			t.Fatalf("duplicate delivery %d: applied %v, err %v; want false, nil", i+1, applied, err)
		}
	}
	if n := invoices(); n != 1 {
		t.Fatalf("after duplicate deliveries: %d invoices, want 1", n)
	}
	if runs := f.runs.Load(); runs != 2 {
		t.Fatalf("the effect ran %d times, want 2 (one failure, one success, no run for duplicates)", runs)
	}
}

func sequencerAppliesInOrder(t *testing.T, env *Env, drv Driver) {
	ctx := Ctx(t)
	seq, err := postgres.NewSequencer(drv.DB, &postgres.SequencerConfig{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	h := drv.Invoice(func() error { return nil })
	evs := make([]core.Event, 2)
	for i := range evs {
		evs[i] = PaidEvent(t, Paid{OrderID: "o-5", Cents: int64(100 * (i + 1))})
		evs[i].AggregateType, evs[i].AggregateID, evs[i].Sequence = "order", "o-5", int64(i+1)
	}
	invoices := func() int64 { return env.Count(t, "invoices", "order_id = 'o-5'") }

	if applied, err := core.ApplyOnce(ctx, seq, Consumer, h, evs[1]); !errors.Is(err, core.ErrSequenceGap) || applied {
		t.Fatalf("second event first: applied %v, err %v; want a sequence gap", applied, err)
	}
	if n := invoices(); n != 0 {
		t.Fatalf("an event ahead of its predecessor wrote %d invoices", n)
	}
	for i, e := range evs {
		if applied, err := core.ApplyOnce(ctx, seq, Consumer, h, e); err != nil || !applied {
			t.Fatalf("event %d in order: applied %v, err %v; want true, nil", i+1, applied, err)
		}
	}
	if applied, err := core.ApplyOnce(ctx, seq, Consumer, h, evs[0]); err != nil || applied {
		t.Fatalf("stale redelivery: applied %v, err %v; want false, nil", applied, err)
	}
	if n := invoices(); n != 2 {
		t.Fatalf("invoices = %d, want 2", n)
	}
}

func joinCallersTx(t *testing.T, env *Env, drv Driver) {
	ctx := Ctx(t)
	d, err := postgres.NewDeduper(drv.DB, &postgres.DeduperConfig{Schema: env.Schema})
	if err != nil {
		t.Fatal(err)
	}
	join := func(o Order, e core.Event, fail error, commit bool) (bool, error) {
		t.Helper()
		applied, onceErr, err := drv.JoinTx(ctx, d, o, e, fail, commit)
		if err != nil {
			t.Fatalf("the caller's transaction for order %s: %v", o.ID, err)
		}
		return applied, onceErr
	}
	doubled := func(o Order) int64 {
		return env.Count(t, "orders", "id = $1 AND total = $2", o.ID, 2*o.Total)
	}
	invoiced := func(e core.Event) int64 { return env.Count(t, "invoices", "id = $1", e.ID.String()) }
	recorded := func(e core.Event) int64 {
		return env.Count(t, "outbox_events_processed", "consumer = $1 AND event_id = $2", JoinConsumer, e.ID.String())
	}

	e := PaidEvent(t, Paid{OrderID: "o-6", Cents: 300})

	// A failed effect rolls back to its savepoint: the caller's own work
	// goes on and commits, without the invoice or the record.
	o := Order{ID: "j-1", Total: 5}
	if applied, err := join(o, e, errBoom, true); applied || !errors.Is(err, errBoom) {
		t.Fatalf("failing effect: applied %v, err %v; want false and the effect's error", applied, err)
	}
	if doubled(o) != 1 || invoiced(e) != 0 || recorded(e) != 0 {
		t.Fatalf("after a failed effect in the caller's transaction: order updated %d, invoices %d, records %d; want 1, 0, 0", doubled(o), invoiced(e), recorded(e))
	}

	// Applied: the effect, its record and the caller's work commit together.
	o = Order{ID: "j-2", Total: 6}
	if applied, err := join(o, e, nil, true); !applied || err != nil {
		t.Fatalf("applied in the caller's transaction: applied %v, err %v; want true, nil", applied, err)
	}
	if doubled(o) != 1 || invoiced(e) != 1 || recorded(e) != 1 {
		t.Fatalf("after the caller committed: order updated %d, invoices %d, records %d; want 1 each", doubled(o), invoiced(e), recorded(e))
	}

	// A duplicate is skipped and leaves the caller's transaction usable.
	o = Order{ID: "j-3", Total: 7}
	if applied, err := join(o, e, nil, true); applied || err != nil {
		t.Fatalf("duplicate in the caller's transaction: applied %v, err %v; want false, nil", applied, err)
	}
	if doubled(o) != 1 || invoiced(e) != 1 {
		t.Fatalf("after a duplicate: order updated %d, invoices %d; want 1 and 1", doubled(o), invoiced(e))
	}

	// The caller rolls back: the effect and its record go with it, and the
	// next delivery applies the effect.
	e2 := PaidEvent(t, Paid{OrderID: "o-7", Cents: 400})
	o = Order{ID: "j-4", Total: 8}
	if applied, err := join(o, e2, nil, false); !applied || err != nil {
		t.Fatalf("applied in a transaction the caller then rolls back: applied %v, err %v; want true, nil", applied, err)
	}
	if n := env.Count(t, "orders", "id = $1", o.ID); n != 0 || invoiced(e2) != 0 || recorded(e2) != 0 {
		t.Fatalf("after the caller rolled back: orders %d, invoices %d, records %d; want none", n, invoiced(e2), recorded(e2))
	}
	o = Order{ID: "j-5", Total: 9}
	if applied, err := join(o, e2, nil, true); !applied || err != nil {
		t.Fatalf("redelivery after the caller's rollback: applied %v, err %v; want true, nil", applied, err)
	}
	if invoiced(e2) != 1 || recorded(e2) != 1 {
		t.Fatalf("after the redelivery committed: invoices %d, records %d; want 1 and 1", invoiced(e2), recorded(e2))
	}
}
