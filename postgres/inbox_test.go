package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// inboxDB is a schema with an inbox table for the consumer "billing" and
// an effects table the handlers write to (no unique key, so a doubled
// effect shows as two rows).
type inboxDB struct {
	pool   *pgxpool.Pool
	schema string
}

func newInboxDB(t testing.TB) inboxDB {
	t.Helper()
	pool := pgtest.Pool(t, 8)
	schema := pgtest.Schema(t, pool, "inbox")
	ctx := ctxT(t)
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema, Table: "billing_inbox"}); err != nil {
		t.Fatalf("migrate the inbox table: %v", err)
	}
	t.Cleanup(func() { dropPublications(t, pool, schema) })
	db := inboxDB{pool: pool, schema: schema}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+db.effects()+` (
		n bigserial, event_id uuid NOT NULL, aggregate_id text NOT NULL, sequence bigint, traceparent text)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// dropPublications drops what migration 007 made for the schema's tables:
// publications belong to the database and outlive DROP SCHEMA.
func dropPublications(t testing.TB, pool *pgxpool.Pool, schema string) {
	rows, err := pool.Query(context.Background(), `SELECT pubname FROM pg_publication WHERE pubname LIKE $1`, "outboxkit."+schema+".%")
	if err != nil {
		t.Errorf("list publications: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Errorf("list publications: %v", err)
		return
	}
	for _, p := range names {
		if _, err := pool.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pgx.Identifier{p}.Sanitize()); err != nil {
			t.Errorf("drop publication %s: %v", p, err)
		}
	}
}

func (db inboxDB) effects() string { return pgx.Identifier{db.schema, "effects"}.Sanitize() }
func (db inboxDB) inbox() string   { return pgx.Identifier{db.schema, "billing_inbox"}.Sanitize() }

func (db inboxDB) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// recordEffect is a handler whose effect is a row in the effects table,
// written in the Deduper's transaction.
func recordEffect(db inboxDB) core.Handler {
	return postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+db.effects()+` (event_id, aggregate_id, sequence, traceparent) VALUES ($1, $2, $3, $4)`,
			e.ID.String(), e.AggregateID, e.Sequence, e.Headers["traceparent"])
		return err
	})
}

func newInbox(t testing.TB, db inboxDB, cfg postgres.InboxConfig) *postgres.Inbox {
	t.Helper()
	if cfg.Consumer == "" {
		cfg.Consumer = "billing"
	}
	cfg.Store.Schema = db.schema
	if cfg.Store.Wakeup == postgres.WakeupAuto {
		cfg.Store.Wakeup = postgres.WakeupPoll
	}
	if cfg.Relay.PollInterval == 0 {
		cfg.Relay.PollInterval = 20 * time.Millisecond
	}
	in, err := postgres.NewInbox(db.pool, &cfg)
	if err != nil {
		t.Fatalf("new inbox: %v", err)
	}
	return in
}

// runInboxWorkers runs a worker per inbox (one per process, as it were)
// until the test ends or stop is called.
func runInboxWorkers(t testing.TB, inboxes ...*postgres.Inbox) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n := len(inboxes)
	done := make(chan error, n)
	for _, in := range inboxes {
		go func() { done <- in.Run(ctx) }()
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range n {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("worker: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

func sequenced(t testing.TB, agg string, seq int64) core.Event {
	e := mustEvent(t, "invoice.line", map[string]any{"agg": agg, "seq": seq})
	e.AggregateType, e.AggregateID, e.Sequence = "invoice", agg, seq
	return e
}

// TestInboxAcceptsDuplicatesOnce: an event delivered again, in the same
// call, in a later batch or through Handle, is stored once and counted
// once; the write is one statement on the pool or the caller's
// transaction.
func TestInboxAcceptsDuplicatesOnce(t *testing.T) {
	t.Parallel()
	db := newInboxDB(t)
	in := newInbox(t, db, postgres.InboxConfig{})
	ctx := ctxT(t)
	a, b, c := mustEvent(t, "a", 1), mustEvent(t, "b", 2), mustEvent(t, "c", 3)

	for _, step := range []struct {
		name   string
		events []core.Event
		want   int
	}{
		{"one new event", []core.Event{a}, 1},
		{"the same event again", []core.Event{a}, 0},
		{"a batch repeating an ID and an accepted event", []core.Event{b, a, b, c}, 2},
		{"the whole batch again", []core.Event{c, b, a}, 0},
	} {
		n, err := in.Accept(ctx, db.pool, step.events...)
		if err != nil || n != step.want {
			t.Fatalf("%s: accepted %d (%v), want %d", step.name, n, err, step.want)
		}
	}
	if err := in.Handle(ctx, a); err != nil {
		t.Fatalf("Handle of a duplicate: %v, want nil so the transport stops redelivering", err)
	}
	if n := db.count(t, `SELECT count(*) FROM `+db.inbox()); n != 3 {
		t.Fatalf("inbox holds %d rows, want 3", n)
	}

	// In the caller's transaction: rolled back with it.
	d := mustEvent(t, "d", 4)
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := in.Accept(ctx, tx, d); err != nil || n != 1 {
		t.Fatalf("accept in a transaction: %d, %v", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := db.count(t, `SELECT count(*) FROM `+db.inbox()+` WHERE id = $1`, d.ID.String()); n != 0 {
		t.Fatal("an event accepted in a rolled-back transaction is in the inbox")
	}

	// An invalid event writes nothing and is permanent for the transport.
	bad := mustEvent(t, "bad", 5)
	bad.Payload = []byte(`{"nul":"\u0000"}`)
	if _, err := in.Accept(ctx, db.pool, d, bad); !errors.Is(err, core.ErrInvalidEvent) {
		t.Fatalf("accept of an invalid event: %v, want ErrInvalidEvent", err)
	}
	if err := in.Handle(ctx, bad); !core.IsPermanent(err) {
		t.Fatalf("Handle of an invalid event: %v, want a permanent error", err)
	}
	if n := db.count(t, `SELECT count(*) FROM `+db.inbox()); n != 3 {
		t.Fatalf("inbox holds %d rows after invalid batches, want 3", n)
	}
}

// TestInboxKeepsTheEventAsDelivered: ID, type, payload, headers (trace
// context), aggregate, the producer's sequence and CreatedAt are stored as
// delivered; the row is due at once with no attempts, whatever the
// producer's AvailableAt and Attempts.
func TestInboxKeepsTheEventAsDelivered(t *testing.T) {
	t.Parallel()
	db := newInboxDB(t)
	in := newInbox(t, db, postgres.InboxConfig{Store: postgres.Config{Ordering: true}})
	ctx := ctxT(t)
	e := sequenced(t, "inv-9", 42)
	e.Source = "shop"
	e.SchemaVersion = 3
	e.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "rojo=1", "tenant": "acme"}
	e.CreatedAt = time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	e.AvailableAt = e.CreatedAt
	e.Attempts = 4
	if err := in.Handle(ctx, e); err != nil {
		t.Fatal(err)
	}
	rec, err := in.Store().Get(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.Event
	if got.Type != e.Type || got.Source != "shop" || got.SchemaVersion != 3 || got.AggregateType != "invoice" ||
		got.AggregateID != "inv-9" || got.Sequence != 42 || !jsonEqual(got.Payload, e.Payload) ||
		len(got.Headers) != 3 || got.Headers["traceparent"] != e.Headers["traceparent"] || got.Headers["tracestate"] != "rojo=1" ||
		!got.CreatedAt.Equal(e.CreatedAt) {
		t.Fatalf("stored %+v\nwant the delivered %+v", got, e)
	}
	if got.Attempts != 0 || time.Since(got.AvailableAt) > time.Minute || rec.State != postgres.StatePending {
		t.Fatalf("stored attempts %d, available %v, state %v: want 0, now, pending", got.Attempts, got.AvailableAt, rec.State)
	}
	// Sequences are not renumbered: the aggregates table stays empty.
	if n := db.count(t, `SELECT count(*) FROM `+pgx.Identifier{db.schema, "billing_inbox_aggregates"}.Sanitize()); n != 0 {
		t.Fatalf("accept bumped %d aggregate counters", n)
	}
}

// TestInboxWorkersApplyOnceInOrder: events of several aggregates accepted
// in reverse order, some twice, are applied exactly once each (checked in
// the database) and, per aggregate, in the producer's sequence order,
// under two workers of two batches each; the handler sees the trace headers.
func TestInboxWorkersApplyOnceInOrder(t *testing.T) {
	t.Parallel()
	db := newInboxDB(t)
	cfg := postgres.InboxConfig{
		Store:   postgres.Config{Ordering: true},
		Handler: recordEffect(db),
		Relay:   core.RelayConfig{Concurrency: 2, BatchSize: 3},
	}
	in, other := newInbox(t, db, cfg), newInbox(t, db, cfg)
	ctx := ctxT(t)
	const aggs, perAgg = 5, 8
	var all []core.Event
	for a := range aggs {
		for s := perAgg; s >= 1; s-- { // newest first
			e := sequenced(t, fmt.Sprintf("inv-%d", a), int64(s))
			e.Headers = map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", a+1, s)}
			all = append(all, e)
		}
	}
	if _, err := in.Accept(ctx, db.pool, all...); err != nil {
		t.Fatal(err)
	}
	runInboxWorkers(t, in, other)
	// Redeliveries while the workers run.
	if n, err := in.Accept(ctx, db.pool, all[:10]...); err != nil || n != 0 {
		t.Fatalf("redelivery accepted %d (%v)", n, err)
	}
	waitFor(t, 30*time.Second, "every event applied", func() bool {
		return db.count(t, `SELECT count(*) FROM `+db.effects()) >= len(all) &&
			db.count(t, `SELECT count(*) FROM `+db.inbox()+` WHERE published_at IS NULL`) == 0
	})
	if n := db.count(t, `SELECT count(*) FROM (SELECT event_id FROM `+db.effects()+` GROUP BY event_id HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d events applied more than once", n)
	}
	if n := db.count(t, `SELECT count(DISTINCT event_id) FROM `+db.effects()); n != len(all) {
		t.Fatalf("%d distinct events applied, want %d", n, len(all))
	}
	// Per aggregate, the order of application is the sequence order.
	if n := db.count(t, `SELECT count(*) FROM (
		SELECT sequence, row_number() OVER (PARTITION BY aggregate_id ORDER BY n) AS k FROM `+db.effects()+`
	) o WHERE sequence <> k`); n != 0 {
		t.Fatalf("%d effects applied out of their aggregate's sequence order", n)
	}
	if n := db.count(t, `SELECT count(*) FROM `+db.effects()+` WHERE traceparent NOT LIKE '00-%-01'`); n != 0 {
		t.Fatalf("%d effects ran without the producer's traceparent", n)
	}
}

// TestInboxFailingHandlerRetriesThenDeadLetters: a failing handler is
// retried with backoff up to MaxAttempts, then dead-lettered, without
// holding back the other events; a permanent failure is dead-lettered at
// the first attempt; a replayed dead letter runs again.
func TestInboxFailingHandlerRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	db := newInboxDB(t)
	var flaky, poison, healthy = mustEvent(t, "flaky", 1), mustEvent(t, "poison", 2), mustEvent(t, "healthy", 3)
	var flakyCalls, poisonCalls atomic.Int32
	var fixed atomic.Bool
	effect := recordEffect(db)
	in := newInbox(t, db, postgres.InboxConfig{
		Handler: core.HandlerFunc(func(ctx context.Context, e core.Event) error {
			switch e.Type {
			case "flaky":
				flakyCalls.Add(1)
				if !fixed.Load() {
					return errors.New("downstream unavailable")
				}
			case "poison":
				poisonCalls.Add(1)
				return core.Permanent(errors.New("cannot apply"))
			}
			return effect.Handle(ctx, e)
		}),
		Relay: core.RelayConfig{Retry: core.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, DisableJitter: true}},
	})
	ctx := ctxT(t)
	if _, err := in.Accept(ctx, db.pool, flaky, poison, healthy); err != nil {
		t.Fatal(err)
	}
	stop := runInboxWorkers(t, in)
	dead := func(id core.ID) bool {
		rec, err := in.Store().Get(ctx, id)
		return err == nil && rec.State == postgres.StateDeadLettered
	}
	waitFor(t, 30*time.Second, "both failing events dead-lettered", func() bool { return dead(flaky.ID) && dead(poison.ID) })
	stop()
	if n := flakyCalls.Load(); n != 3 {
		t.Errorf("the failing handler ran %d times, want MaxAttempts = 3", n)
	}
	if n := poisonCalls.Load(); n != 1 {
		t.Errorf("the permanently failing handler ran %d times, want 1", n)
	}
	rec, err := in.Store().Get(ctx, flaky.ID)
	if err != nil || rec.LastError == "" || rec.Attempts != 3 {
		t.Errorf("dead letter: %+v (%v), want 3 attempts and the handler's error", rec, err)
	}
	if n := db.count(t, `SELECT count(*) FROM `+db.effects()+` WHERE event_id = $1`, healthy.ID.String()); n != 1 {
		t.Errorf("the healthy event was applied %d times, want 1", n)
	}

	// Fixed, replayed (what outboxctl dlq replay does): applied once.
	fixed.Store(true)
	if n, err := in.Store().Replay(ctx, core.ReplayFilter{IDs: []core.ID{flaky.ID}}); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	runInboxWorkers(t, in)
	waitFor(t, 30*time.Second, "the replayed event applied", func() bool {
		return db.count(t, `SELECT count(*) FROM `+db.effects()+` WHERE event_id = $1`, flaky.ID.String()) == 1
	})
}

// TestInboxDeduperNeedsTheInbox: the receiving Deduper records nothing, so
// paired with another handler it fails the delivery rather than pass it
// as deduplicated.
func TestInboxDeduperNeedsTheInbox(t *testing.T) {
	t.Parallel()
	db := newInboxDB(t)
	in := newInbox(t, db, postgres.InboxConfig{})
	ctx := ctxT(t)
	e := mustEvent(t, "a", 1)
	applied, err := core.ApplyOnce(ctx, in.Deduper(), in.Consumer(), in, e)
	if err != nil || !applied {
		t.Fatalf("first delivery: applied %v, %v; want applied", applied, err)
	}
	applied, err = core.ApplyOnce(ctx, in.Deduper(), in.Consumer(), in, e)
	if err != nil || applied {
		t.Fatalf("redelivery: applied %v, %v; want a duplicate", applied, err)
	}
	other := core.HandlerFunc(func(context.Context, core.Event) error { return nil })
	if _, err := core.ApplyOnce(ctx, in.Deduper(), in.Consumer(), other, e); !errors.Is(err, postgres.ErrNotInboxHandler) {
		t.Fatalf("inbox Deduper with another handler: %v, want ErrNotInboxHandler", err)
	}
	if err := in.Run(ctx); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("Run without a Handler: %v, want ErrInvalidConfig", err)
	}
}

func TestInboxConfigIsValidated(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 1)
	for name, cfg := range map[string]*postgres.InboxConfig{
		"nil":                       nil,
		"no consumer":               {},
		"consumer not a table name": {Consumer: "billing-service"},
		"consumer too long":         {Consumer: "a_consumer_name_much_longer_than_34_bytes"},
		"bad relay config":          {Consumer: "billing", Handler: core.HandlerFunc(func(context.Context, core.Event) error { return nil }), Relay: core.RelayConfig{PublishTimeout: time.Minute, LeaseDuration: time.Second}},
	} {
		if _, err := postgres.NewInbox(pool, cfg); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	in, err := postgres.NewInbox(pool, &postgres.InboxConfig{Consumer: "billing-service", Store: postgres.Config{Table: "billing_inbox"}})
	if err != nil || in.Table() != "billing_inbox" {
		t.Fatalf("a consumer name that is no identifier, with a Table: %v", err)
	}
	in, err = postgres.NewInbox(pool, &postgres.InboxConfig{Consumer: "billing"})
	if err != nil || in.Table() != "billing_inbox" || in.Consumer() != "billing" {
		t.Fatalf("default table: %v, %v", in, err)
	}
}

// TestInboxSequencerClosesGaps: events 2 and 3 of an aggregate arrive
// before 1. The ordered claim alone would apply 2 (nothing lower is
// pending); with a Sequencer as the workers' Deduper, 2 is retried as a
// gap until 1 arrives, and the effects land in order 1, 2, 3, once each.
func TestInboxSequencerClosesGaps(t *testing.T) {
	t.Parallel()
	db := newInboxDB(t)
	seq, err := postgres.NewSequencer(db.pool, &postgres.SequencerConfig{Schema: db.schema, Table: "billing_inbox", GapRetryAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	in := newInbox(t, db, postgres.InboxConfig{
		Store:   postgres.Config{Ordering: true},
		Handler: recordEffect(db),
		Deduper: seq,
		Relay:   core.RelayConfig{Retry: core.RetryPolicy{MaxAttempts: 1000, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}},
	})
	ctx := ctxT(t)
	e1, e2, e3 := sequenced(t, "inv-1", 1), sequenced(t, "inv-1", 2), sequenced(t, "inv-1", 3)
	if _, err := in.Accept(ctx, db.pool, e3, e2); err != nil {
		t.Fatal(err)
	}
	runInboxWorkers(t, in)
	waitFor(t, 30*time.Second, "event 2 retried as a gap", func() bool {
		rec, err := in.Store().Get(ctx, e2.ID)
		return err == nil && rec.Attempts >= 2 && strings.Contains(rec.LastError, "sequence gap")
	})
	if n := db.count(t, `SELECT count(*) FROM `+db.effects()); n != 0 {
		t.Fatalf("%d effects applied before the aggregate's first event arrived", n)
	}
	if _, err := in.Accept(ctx, db.pool, e1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "all three applied", func() bool {
		return db.count(t, `SELECT count(*) FROM `+db.inbox()+` WHERE published_at IS NULL`) == 0
	})
	rows, err := db.pool.Query(ctx, `SELECT sequence FROM `+db.effects()+` ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	order, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[1 2 3]" {
		t.Fatalf("effects applied in order %v, want [1 2 3]", order)
	}
}
