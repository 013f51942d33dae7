package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for a consumer on *sql.DB

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// droppingConsumer is a consumer that applies events through a Deduper
// and silently drops every 50th delivery it gets: it acknowledges the
// delivery and records nothing, the bug reconcile exists to find. Events
// of type "poison" fail permanently, so the relay dead-letters them.
type droppingConsumer struct {
	dedup    *postgres.Deduper
	consumer string

	mu      sync.Mutex
	n       int
	dropped []core.ID
}

func (c *droppingConsumer) Publish(ctx context.Context, events []core.Event) error {
	be := core.NewBatchError(len(events))
	for i, e := range events {
		if e.Type == "poison" {
			be.Set(i, core.Permanent(errors.New("consumer answered 400: cannot decode poison")))
			continue
		}
		c.mu.Lock()
		c.n++
		drop := c.n%50 == 0
		if drop {
			c.dropped = append(c.dropped, e.ID)
		}
		c.mu.Unlock()
		if drop {
			continue
		}
		if _, err := c.dedup.Once(ctx, core.DedupeKey{Consumer: c.consumer, EventID: e.ID}, func(context.Context) error { return nil }); err != nil {
			be.Set(i, err)
		}
	}
	return be.ErrOrNil()
}

// relayThrough publishes every due event of s to pub with a real relay.
func relayThrough(t *testing.T, s *postgres.Store, pub core.Publisher) {
	t.Helper()
	relay, err := core.NewRelay(s, pub, &core.RelayConfig{BatchSize: 37, Retry: core.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// Drain stops at the first claim that is not full, which with
	// ordering is every claim: drain until nothing is due.
	for {
		n, err := relay.Drain(ctxT(t))
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
		if n == 0 {
			return
		}
	}
}

// counts prints a report's counts, for failure messages.
func counts(r *postgres.ReconcileReport) string {
	return fmt.Sprintf("published %d applied %d missing %d in flight %d pending %d dead %d (applied anyway %d) records %d phantoms %d; listed missing %d dead %d phantoms %d; warnings %q; transport error %q",
		r.Published, r.Applied, r.Missing, r.InFlight, r.Pending, r.DeadLettered, r.DeadAppliedAnyway, r.Records, r.Phantoms,
		len(r.MissingEvents), len(r.DeadLetters), len(r.PhantomRecords), r.Warnings, r.TransportError)
}

func sortedIDs(ids []core.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	slices.Sort(out)
	return out
}

func listedIDs(evs []postgres.ReconcileEvent) []core.ID {
	out := make([]core.ID, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// fakeTransport answers for the IDs it knows and records what it was asked.
type fakeTransport struct {
	mu    sync.Mutex
	known map[core.ID]postgres.TransportState
	asked []core.ID
	err   error
}

func (f *fakeTransport) Lookup(_ context.Context, ids []core.ID) (map[core.ID]postgres.TransportState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, ids...)
	if f.err != nil {
		return nil, f.err
	}
	out := map[core.ID]postgres.TransportState{}
	for _, id := range ids {
		if st, ok := f.known[id]; ok {
			out[id] = st
		}
	}
	return out, nil
}

func TestReconcileFindsDroppedEventsPhantomsAndDeadLetters(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ctx := ctxT(t)
	s := newStore(t, db, postgres.Config{})
	dedup, err := postgres.NewDeduper(db.pool, &postgres.DeduperConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	const consumer = "billing"

	// Written a minute ago, so a window ending now holds them; one
	// poison event the consumer refuses for good.
	evs := events(t, 500, "order.placed")
	poison := mustEvent(t, "poison", map[string]int{"n": -1})
	for i := 0; i < len(evs); i += 100 {
		if err := addTx(ctx, s, db.pool, evs[i:i+100]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := addTx(ctx, s, db.pool, poison); err != nil {
		t.Fatal(err)
	}
	tbl := fmt.Sprintf("%q.outbox_events", db.schema)
	if _, err := db.pool.Exec(ctx, `UPDATE `+tbl+` SET created_at = created_at - interval '1 minute', available_at = available_at - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	c := &droppingConsumer{dedup: dedup, consumer: consumer}
	relayThrough(t, s, c)
	if len(c.dropped) != 10 {
		t.Fatalf("the consumer dropped %d events, want 10", len(c.dropped))
	}
	// A record of an event this outbox never wrote, and another
	// consumer's records, which must not count.
	phantom := core.NewID()
	processed := fmt.Sprintf("%q.outbox_events_processed", db.schema)
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+processed+` (consumer, event_id) VALUES ($1, $2), ('shipping', $3)`,
		consumer, phantom.String(), core.NewID().String()); err != nil {
		t.Fatal(err)
	}
	// An event written outside the window, dropped too: never reported.
	late := mustEvent(t, "order.placed", map[string]int{"n": 1000})
	if err := addTx(ctx, s, db.pool, late); err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `UPDATE `+tbl+` SET published_at = now() - interval '20 minutes', created_at = now() + interval '1 hour' WHERE id = $1`, late.ID.String()); err != nil {
		t.Fatal(err)
	}

	known := c.dropped[3]
	tr := &fakeTransport{known: map[core.ID]postgres.TransportState{
		known: {State: "DELIVERED", MessageID: "msg_1", ResponseStatus: 200},
	}}
	var onMissing []core.ID
	cfg := &postgres.ReconcileConfig{
		Schema: db.schema, Consumer: consumer, Grace: -1,
		Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Minute),
		Transport: tr,
		OnMissing: func(_ context.Context, m []postgres.ReconcileEvent) error {
			onMissing = append(onMissing, listedIDs(m)...)
			return nil
		},
	}
	for _, pageSize := range []int{0, 7} {
		t.Run(fmt.Sprintf("page size %d", pageSize), func(t *testing.T) {
			onMissing, tr.asked = nil, nil
			cfg := *cfg
			cfg.PageSize = pageSize
			rep, err := postgres.Reconcile(ctx, db.pool, db.pool, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Published != 500 || rep.Applied != 490 || rep.Missing != 10 || rep.InFlight != 0 || rep.Pending != 0 ||
				rep.DeadLettered != 1 || rep.DeadAppliedAnyway != 0 || rep.Records != 491 || rep.Phantoms != 1 || rep.OK() {
				t.Fatalf("report: %s", counts(rep))
			}
			if got, want := sortedIDs(listedIDs(rep.MissingEvents)), sortedIDs(c.dropped); !slices.Equal(got, want) {
				t.Errorf("missing events\n got %v\nwant %v", got, want)
			}
			if got, want := sortedIDs(onMissing), sortedIDs(c.dropped); !slices.Equal(got, want) {
				t.Errorf("OnMissing saw\n %v\nwant %v", got, want)
			}
			if got, want := sortedIDs(tr.asked), sortedIDs(c.dropped); !slices.Equal(got, want) {
				t.Errorf("the transport was asked about\n %v\nwant %v", got, want)
			}
			for _, m := range rep.MissingEvents {
				if m.Type != "order.placed" || m.PublishedAt.IsZero() || m.CreatedAt.IsZero() || m.Attempts != 1 || m.Applied {
					t.Errorf("missing event %+v", m)
				}
				if (m.Transport != nil) != (m.ID == known) || m.Transport != nil && m.Transport.State != "DELIVERED" {
					t.Errorf("missing event %s: transport state %+v", m.ID, m.Transport)
				}
			}
			if len(rep.DeadLetters) != 1 || rep.DeadLetters[0].ID != poison.ID || rep.DeadLetters[0].DeadAt.IsZero() ||
				rep.DeadLetters[0].LastError == "" || rep.DeadLetters[0].Applied {
				t.Errorf("dead letters: %+v", rep.DeadLetters)
			}
			if len(rep.PhantomRecords) != 1 || rep.PhantomRecords[0].EventID != phantom || rep.PhantomRecords[0].MaybePruned {
				t.Errorf("phantoms: %+v", rep.PhantomRecords)
			}
			if rep.TransportError != "" {
				t.Errorf("transport error %q", rep.TransportError)
			}
		})
	}

	// Within the default grace (10 minutes) the same events are still in
	// flight, not missing.
	graced := *cfg
	graced.Grace, graced.Transport, graced.OnMissing = 0, nil, nil
	rep, err := postgres.Reconcile(ctx, db.pool, db.pool, &graced)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 0 || rep.InFlight != 10 || rep.Applied != 490 || len(rep.MissingEvents) != 0 || rep.Phantoms != 1 {
		t.Errorf("with a 10m grace: %s", counts(rep))
	}

	// Lists are capped; counts are not. A failing transport is reported,
	// not fatal.
	capped := *cfg
	capped.MaxListed, capped.OnMissing = 3, nil
	capped.Transport = &fakeTransport{err: errors.New("qstash: 401 unauthorized")}
	rep, err = postgres.Reconcile(ctx, db.pool, db.pool, &capped)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 10 || len(rep.MissingEvents) != 3 || rep.TransportError != "qstash: 401 unauthorized" {
		t.Errorf("capped: missing %d, listed %d, transport error %q", rep.Missing, len(rep.MissingEvents), rep.TransportError)
	}

	// A record processed before the oldest published event the outbox
	// keeps (the late one, published 20 minutes ago) may belong to an
	// event retention pruned: listed as such, and warned about.
	old := core.NewID()
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+processed+` (consumer, event_id, processed_at) VALUES ($1, $2, now() - interval '30 minutes')`,
		consumer, old.String()); err != nil {
		t.Fatal(err)
	}
	pruned := *cfg
	pruned.Transport, pruned.OnMissing = nil, nil
	if rep, err = postgres.Reconcile(ctx, db.pool, db.pool, &pruned); err != nil {
		t.Fatal(err)
	}
	if rep.Phantoms != 2 || len(rep.PhantomRecords) != 2 || rep.PhantomRecords[0].EventID != old || !rep.PhantomRecords[0].MaybePruned ||
		rep.PhantomRecords[1].MaybePruned || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "retention pruned") {
		t.Errorf("a record older than the outbox's horizon: %s %+v", counts(rep), rep.PhantomRecords)
	}
	if _, err := db.pool.Exec(ctx, `DELETE FROM `+processed+` WHERE event_id = $1`, old.String()); err != nil {
		t.Fatal(err)
	}

	// A window after everything holds nothing; the records of other
	// consumers never count.
	empty := *cfg
	empty.Since, empty.Until, empty.Transport, empty.OnMissing = time.Now().Add(2*time.Hour), time.Now().Add(3*time.Hour), nil, nil
	if rep, err = postgres.Reconcile(ctx, db.pool, db.pool, &empty); err != nil {
		t.Fatal(err)
	}
	if rep.Published+rep.Missing+rep.DeadLettered+rep.Records+rep.Phantoms != 0 || !rep.OK() {
		t.Errorf("empty window: %s", counts(rep))
	}
	other := *cfg
	other.Consumer, other.Transport, other.OnMissing = "shipping", nil, nil
	if rep, err = postgres.Reconcile(ctx, db.pool, db.pool, &other); err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 500 || rep.Applied != 0 || rep.Records != 1 || rep.Phantoms != 1 {
		t.Errorf("consumer shipping: %s", counts(rep))
	}
}

func TestReconcileHealthyConsumerReportsNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ctx := ctxT(t)
	s := newStore(t, db, postgres.Config{})
	dedup, err := postgres.NewDeduper(db.pool, &postgres.DeduperConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := addTx(ctx, s, db.pool, events(t, 300, "order.placed")...); err != nil {
		t.Fatal(err)
	}
	relayThrough(t, s, core.PublisherFunc(func(ctx context.Context, evs []core.Event) error {
		for _, e := range evs {
			if _, err := dedup.Once(ctx, core.DedupeKey{Consumer: "billing", EventID: e.ID}, func(context.Context) error { return nil }); err != nil {
				return err
			}
		}
		return nil
	}))
	// A redelivery changes nothing.
	rep, err := postgres.Reconcile(ctx, db.pool, db.pool, &postgres.ReconcileConfig{Schema: db.schema, Consumer: "billing", Grace: -1, PageSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Published != 300 || rep.Applied != 300 || rep.Records != 300 || rep.Missing+rep.Phantoms+rep.DeadLettered+rep.InFlight != 0 ||
		len(rep.MissingEvents)+len(rep.PhantomRecords)+len(rep.DeadLetters) != 0 {
		t.Errorf("healthy consumer: %s", counts(rep))
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings: %q", rep.Warnings)
	}
}

// TestReconcileConsumerElsewhere keeps the consumer's records behind
// another handle (a *sql.DB through pgx's stdlib driver) in another
// schema: nothing is joined in SQL, so the consumer's database may be
// anywhere.
func TestReconcileConsumerElsewhere(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ctx := ctxT(t)
	consumerSchema := migratedSchema(t, db.pool)
	sqlDB, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = sqlDB.Close() })

	s := newStore(t, db, postgres.Config{})
	dedup, err := postgres.NewDeduper(sqlDB, &postgres.DeduperConfig{Schema: consumerSchema})
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, 120, "invoice.sent")
	if err := addTx(ctx, s, db.pool, evs...); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var dropped []core.ID
	n := 0
	relayThrough(t, s, core.PublisherFunc(func(ctx context.Context, evs []core.Event) error {
		for _, e := range evs {
			mu.Lock()
			n++
			drop := n%50 == 0
			if drop {
				dropped = append(dropped, e.ID)
			}
			mu.Unlock()
			if drop {
				continue
			}
			if _, err := dedup.Once(ctx, core.DedupeKey{Consumer: "invoicing", EventID: e.ID}, func(context.Context) error { return nil }); err != nil {
				return err
			}
		}
		return nil
	}))
	rep, err := postgres.Reconcile(ctx, db.pool, sqlDB, &postgres.ReconcileConfig{
		Schema: db.schema, ConsumerSchema: consumerSchema, Consumer: "invoicing", Grace: -1, PageSize: 25,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != 120 || rep.Applied != 118 || rep.Missing != 2 || rep.Records != 118 || rep.Phantoms != 0 {
		t.Fatalf("report: %s", counts(rep))
	}
	if got, want := sortedIDs(listedIDs(rep.MissingEvents)), sortedIDs(dropped); !slices.Equal(got, want) {
		t.Errorf("missing\n got %v\nwant %v", got, want)
	}

	// The consumer's tables must exist where it says.
	_, err = postgres.Reconcile(ctx, db.pool, sqlDB, &postgres.ReconcileConfig{Schema: db.schema, ConsumerSchema: "no_such_schema", Consumer: "invoicing"})
	if !errors.Is(err, postgres.ErrNotMigrated) {
		t.Errorf("consumer schema without tables: err = %v, want ErrNotMigrated", err)
	}
	if _, err := postgres.Reconcile(ctx, db.pool, sqlDB, &postgres.ReconcileConfig{Schema: db.schema}); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("no consumer: err = %v, want ErrInvalidConfig", err)
	}
}

// TestReconcileSequencedConsumer: a Sequencer writes no processed record
// for sequenced events; its position per aggregate says what it applied.
func TestReconcileSequencedConsumer(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ctx := ctxT(t)
	s := newStore(t, db, postgres.Config{Ordering: true})
	seq, err := postgres.NewSequencer(db.pool, &postgres.SequencerConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	var evs []core.Event
	for i := range 5 {
		e := mustEvent(t, "order.step", map[string]int{"step": i})
		e.AggregateType, e.AggregateID = "order", "42"
		evs = append(evs, e)
	}
	unordered := mustEvent(t, "order.note", map[string]int{"n": 1})
	if err := addTx(ctx, s, db.pool, append(evs, unordered)...); err != nil {
		t.Fatal(err)
	}
	// The consumer applies steps 1 to 3 of the aggregate, then stops
	// (its deliveries of 4 and 5 acknowledged without effect), and the
	// unordered event through the processed table.
	relayThrough(t, s, core.PublisherFunc(func(ctx context.Context, got []core.Event) error {
		for _, e := range got {
			if e.Sequence > 3 {
				continue
			}
			if _, err := seq.OnceInOrder(ctx, "billing", e, func(context.Context) error { return nil }); err != nil {
				return err
			}
		}
		return nil
	}))
	rep, err := postgres.Reconcile(ctx, db.pool, db.pool, &postgres.ReconcileConfig{Schema: db.schema, Consumer: "billing", Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != 6 || rep.Applied != 4 || rep.Missing != 2 {
		t.Fatalf("report: %s", counts(rep))
	}
	if got, want := sortedIDs(listedIDs(rep.MissingEvents)), sortedIDs([]core.ID{evs[3].ID, evs[4].ID}); !slices.Equal(got, want) {
		t.Errorf("missing\n got %v\nwant %v", got, want)
	}
}
