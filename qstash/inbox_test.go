package qstash_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// inboxDB is a schema holding the consumer "billing"'s inbox table and an
// effects table without a unique key, so a doubled effect is two rows.
type inboxDB struct {
	pool   *pgxpool.Pool
	schema string
}

func newInboxDB(t testing.TB) inboxDB {
	t.Helper()
	pool := pgtest.Pool(t, 8)
	schema := pgtest.Schema(t, pool, "qsinbox")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema, Table: "billing_inbox"}); err != nil {
		t.Fatalf("migrate the inbox table: %v", err)
	}
	t.Cleanup(func() {
		// Migration 007's publication belongs to the database, not the schema.
		_, err := pool.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pgx.Identifier{"outboxkit." + schema + ".billing_inbox"}.Sanitize())
		if err != nil {
			t.Errorf("drop publication: %v", err)
		}
	})
	db := inboxDB{pool: pool, schema: schema}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+db.effects()+` (
		n bigserial, event_id uuid NOT NULL, aggregate_id text NOT NULL, sequence bigint, traceparent text)`); err != nil {
		t.Fatal(err)
	}
	return db
}

func (db inboxDB) effects() string { return pgx.Identifier{db.schema, "effects"}.Sanitize() }

func (db inboxDB) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// slowEffect waits d, then writes the effect in the Deduper's transaction.
func (db inboxDB) slowEffect(d time.Duration) core.Handler {
	return postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		select {
		case <-time.After(d): // the handler's own work, not a wait for the test
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+db.effects()+` (event_id, aggregate_id, sequence, traceparent) VALUES ($1, $2, $3, $4)`,
			e.ID.String(), e.AggregateID, e.Sequence, e.Headers["traceparent"])
		return err
	})
}

func newTestInbox(t testing.TB, db inboxDB, h core.Handler) *postgres.Inbox {
	t.Helper()
	in, err := postgres.NewInbox(db.pool, &postgres.InboxConfig{
		Consumer: "billing",
		Store:    postgres.Config{Schema: db.schema, Ordering: true, Wakeup: postgres.WakeupPoll},
		Handler:  h,
		Relay:    core.RelayConfig{Concurrency: 2, BatchSize: 2, PollInterval: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestInboxReceiverAcceptsDuplicatesOnce: two deliveries of one event,
// each signed anew as QStash signs its retries, answer 200 and store one
// row: the first applied (accepted), the second a duplicate.
func TestInboxReceiverAcceptsDuplicatesOnce(t *testing.T) {
	t.Parallel()
	db := newInboxDB(t)
	in := newTestInbox(t, db, nil)
	var decisions []qstash.Decision
	rc, err := qstash.NewInboxReceiver(in, &qstash.ReceiverConfig{
		CurrentSigningKey: currentKey, NextSigningKey: nextKey, URL: endpointURL, Clock: fixedClock{testNow},
		OnDecision: func(_ context.Context, d qstash.Decision) { decisions = append(decisions, d) },
	})
	if err != nil {
		t.Fatal(err)
	}
	e := testEvent(t)
	for i := range 2 {
		if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusOK {
			t.Fatalf("delivery %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	if len(decisions) != 2 || decisions[0].Outcome != qstash.OutcomeApplied || decisions[1].Outcome != qstash.OutcomeDuplicate {
		t.Fatalf("decisions %+v, want applied then duplicate", decisions)
	}
	rec, err := in.Store().Get(context.Background(), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Sequence != e.Sequence || rec.Headers["traceparent"] != e.Headers["traceparent"] || rec.AggregateID != e.AggregateID {
		t.Errorf("inbox row %+v, want the delivered event %+v", rec.Event, e)
	}
	if n := db.count(t, `SELECT count(*) FROM `+pgx.Identifier{db.schema, "billing_inbox"}.Sanitize()); n != 1 {
		t.Errorf("inbox holds %d rows, want 1", n)
	}

	// What the inbox provides cannot be configured beside it.
	for name, cfg := range map[string]qstash.ReceiverConfig{
		"Handler":  {Handler: in},
		"Deduper":  {Deduper: in.Deduper()},
		"Consumer": {Consumer: "shipping"},
	} {
		cfg.CurrentSigningKey, cfg.NextSigningKey, cfg.URL = currentKey, nextKey, endpointURL
		if _, err := qstash.NewInboxReceiver(in, &cfg); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("%s set beside the inbox: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestInboxSlowHandlerBehindShortTimeout: QStash gives each delivery 1 s,
// the handler takes 1.5 s. Behind the inbox receiver every delivery is
// answered 200 at the first attempt, within the timeout, and the workers
// apply every event exactly once (counted in the database), per aggregate
// in sequence order, with the producer's trace context.
func TestInboxSlowHandlerBehindShortTimeout(t *testing.T) {
	t.Parallel()
	// The timeout leaves room for the inbox's INSERT on a loaded machine
	// under -race (240–310 ms seen with every package's tests running); the
	// handler is still slower than it, which is what the test is about.
	const timeout, handlerTakes = time.Second, 1500 * time.Millisecond
	db := newInboxDB(t)
	in := newTestInbox(t, db, db.slowEffect(handlerTakes))

	dev, err := qstashdev.New(qstashdev.Config{Timeout: timeout, BackoffScale: 0.0001})
	if err != nil {
		t.Fatal(err)
	}
	devSrv := httptest.NewServer(dev.Handler())
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		devSrv.Close()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/hooks/orders"
	rc, err := qstash.NewInboxReceiver(in, &qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               url,
	})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		took   time.Duration
	}
	var (
		mu      sync.Mutex
		answers []answer
	)
	recvSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rc.ServeHTTP(sw, r)
		mu.Lock()
		answers = append(answers, answer{sw.status, time.Since(start)})
		mu.Unlock()
	}))
	recvSrv.Listener.Close()
	recvSrv.Listener = ln
	recvSrv.Start()
	t.Cleanup(recvSrv.Close)
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{BaseURL: devSrv.URL, Token: qstashdev.DefaultToken, Destination: qstash.Target{URL: url}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("inbox worker: %v", err)
		}
	})

	// Three aggregates of two events; each published after its
	// predecessor was accepted, as an ordered outbox relays them.
	var all []core.Event
	for s := int64(1); s <= 2; s++ {
		var round []core.Event
		for a := range 3 {
			e, err := core.NewEvent("invoice.line", map[string]any{"agg": a, "seq": s})
			if err != nil {
				t.Fatal(err)
			}
			e.AggregateType, e.AggregateID, e.Sequence = "invoice", fmt.Sprintf("inv-%d", a), s
			e.Headers = map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", a+1, s)}
			round = append(round, e)
		}
		if err := pub.Publish(ctx, round); err != nil {
			t.Fatal(err)
		}
		waitCtx, stop := context.WithTimeout(ctx, 20*time.Second)
		err := dev.WaitIdle(waitCtx)
		stop()
		if err != nil {
			t.Fatalf("qstashdev delivering: %v", err)
		}
		all = append(all, round...)
	}

	deadline := time.Now().Add(30 * time.Second)
	for db.count(t, `SELECT count(*) FROM `+db.effects()) < len(all) ||
		db.count(t, `SELECT count(*) FROM `+pgx.Identifier{db.schema, "billing_inbox"}.Sanitize()+` WHERE published_at IS NULL`) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the workers: %d of %d effects", db.count(t, `SELECT count(*) FROM `+db.effects()), len(all))
		}
		time.Sleep(20 * time.Millisecond)
	}

	mu.Lock()
	got := append([]answer(nil), answers...)
	mu.Unlock()
	if len(got) != len(all) {
		t.Errorf("%d deliveries for %d events: QStash retried, so some answer missed the %v timeout", len(got), len(all), timeout)
	}
	for _, a := range got {
		if a.status != http.StatusOK || a.took >= timeout {
			t.Errorf("a delivery was answered %d after %v, want 200 within %v", a.status, a.took, timeout)
		}
	}
	if dlq := dev.DLQ(); len(dlq) != 0 {
		t.Errorf("qstashdev dead-lettered %d deliveries", len(dlq))
	}
	if n := db.count(t, `SELECT count(*) FROM (SELECT event_id FROM `+db.effects()+` GROUP BY event_id HAVING count(*) > 1) d`); n != 0 {
		t.Errorf("%d events applied more than once", n)
	}
	if n := db.count(t, `SELECT count(DISTINCT event_id) FROM `+db.effects()); n != len(all) {
		t.Errorf("%d distinct events applied, want %d", n, len(all))
	}
	if n := db.count(t, `SELECT count(*) FROM (
		SELECT sequence, row_number() OVER (PARTITION BY aggregate_id ORDER BY n) AS k FROM `+db.effects()+`
	) o WHERE sequence <> k`); n != 0 {
		t.Errorf("%d effects applied out of sequence order", n)
	}
	for _, e := range all {
		if n := db.count(t, `SELECT count(*) FROM `+db.effects()+` WHERE event_id = $1 AND traceparent = $2`, e.ID.String(), e.Headers["traceparent"]); n != 1 {
			t.Errorf("event %s: %d effects with its producer's traceparent, want 1", e.ID, n)
		}
	}
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
