package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

var failoverLong = flag.Bool("failover.long", false, "run the failover test longer and busier (make failover)")

// TestFailover promotes a streaming replica while writers commit and
// three relays publish through a multi-host URL with
// target_session_attrs=read-write, then stops the old primary as a crash
// would. Nothing the writers saw committed may be lost, nothing may be
// published that the new primary does not hold, republishes must stay
// within the batches in flight at the failover, every relay must publish
// again within seconds, and every relay's WAL wake-up must stream from
// the new primary.
func TestFailover(t *testing.T) {
	if *long {
		t.Skip("-long given: the long chaos suite runs instead; make failover runs this test alone")
	}
	cfg := failoverScenario{writers: 4, rate: 200, before: 600, after: 600}
	if *failoverLong {
		cfg = failoverScenario{writers: 8, rate: 800, before: 8000, after: 8000}
	}
	runFailover(t, cfg)
}

type failoverScenario struct {
	writers int
	rate    int // commits per second, all writers together
	// before and after are how many events must have been published
	// before the failover and committed after it.
	before, after int
}

const (
	foRelays      = 3
	foBatch       = 50
	foConcurrency = 2
	foLease       = 4 * time.Second
)

// foSink is every relay's transport: it records each accepted publish.
type foSink struct {
	mu    sync.Mutex
	pubs  map[core.ID]int
	times [foRelays][]time.Time // publish times per relay
}

func (s *foSink) publisher(relay int) core.Publisher {
	return core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range events {
			s.pubs[e.ID]++
		}
		s.times[relay] = append(s.times[relay], now)
		return nil
	})
}

func (s *foSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pubs)
}

// firstAfter returns when relay first published after t (zero if not yet).
func (s *foSink) firstAfter(relay int, t time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.times[relay]), func(i int) bool { return s.times[relay][i].After(t) })
	if i == len(s.times[relay]) {
		return time.Time{}
	}
	return s.times[relay][i]
}

// foWriter commits orders and their events and records which commits
// succeeded: those are what a failover may not lose.
type foWriter struct {
	pool   *pgxpool.Pool
	store  *postgres.Store
	schema string

	mu        sync.Mutex
	committed []core.ID
	commitAt  []time.Time
	failed    int
}

func (w *foWriter) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		e, err := core.NewEvent("order.placed", map[string]int{"n": i})
		if err != nil {
			panic(err)
		}
		e.AggregateType, e.AggregateID = "order", e.ID.String()
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = pgx.BeginFunc(tctx, w.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(tctx, `INSERT INTO `+pgx.Identifier{w.schema, "orders"}.Sanitize()+` (event_id) VALUES ($1)`, e.ID.String()); err != nil {
				return err
			}
			return w.store.Add(tctx, tx, e)
		})
		cancel()
		w.mu.Lock()
		if err == nil {
			w.committed = append(w.committed, e.ID)
			w.commitAt = append(w.commitAt, time.Now())
		} else {
			// The commit may or may not have happened (a connection cut
			// during COMMIT): the new primary's tables say, and whatever
			// is there must be published like the rest.
			w.failed++
		}
		w.mu.Unlock()
	}
}

func (w *foWriter) snapshot() ([]core.ID, []time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.committed), slices.Clone(w.commitAt), w.failed
}

func runFailover(t *testing.T, sc failoverScenario) {
	ctx := context.Background()
	start := time.Now()
	pair := newScratchPair(t)
	t.Logf("scratch primary on %d, synchronous replica on %d, ready in %s", pair.primaryPort, pair.replica, time.Since(start).Round(time.Millisecond))

	schema := "failover_" + randomHex(3)
	{
		conn := pair.connect(ctx, pair.primaryPort)
		if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.orders (event_id uuid PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	multi := pair.multiHostURL()
	newPool := func(app string, conns int32) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(multi)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = conns
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	wpool := newPool("fo-writer", int32(sc.writers+2))
	if err := postgres.Migrate(ctx, wpool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	wstore, err := postgres.New(wpool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}

	// Three relays, each on a pool of its own over the multi-host URL.
	// Relays 0 and 1 wake from connections that copy their pool's
	// settings; relay 2 is given the multi-host URL as its WakeupURL.
	sink := &foSink{pubs: make(map[core.ID]int)}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	apps := make([]string, foRelays)
	relayCtx, stopRelays := context.WithCancel(ctx)
	var relaysDone sync.WaitGroup
	defer func() { stopRelays(); relaysDone.Wait() }()
	for i := range foRelays {
		apps[i] = fmt.Sprintf("fo-relay-%d", i)
		pool := newPool(apps[i], 4)
		scfg := &postgres.Config{Schema: schema, ListenBackoffMax: 500 * time.Millisecond, Logger: logger}
		if i == 2 {
			scfg.WakeupURL = multi + " application_name=" + apps[i]
		}
		store, err := postgres.New(pool, scfg)
		if err != nil {
			t.Fatal(err)
		}
		relay, err := core.NewRelay(store, sink.publisher(i), &core.RelayConfig{
			BatchSize: foBatch, Concurrency: foConcurrency, LeaseDuration: foLease, PublishTimeout: 2 * time.Second,
			PollInterval: 250 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
			Retry:  core.RetryPolicy{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
			Logger: logger,
		})
		if err != nil {
			t.Fatal(err)
		}
		relaysDone.Add(1)
		go func() {
			defer relaysDone.Done()
			if err := relay.Run(relayCtx); err != nil && relayCtx.Err() == nil {
				t.Errorf("relay %d: %v", i, err)
			}
		}()
	}
	primary := pair.connect(ctx, pair.primaryPort)
	defer primary.Close(ctx)
	if err := waitUntil(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		n, err := walStreams(ctx, primary, time.Time{}, apps)
		return n == foRelays, err
	}); err != nil {
		t.Fatalf("the relays' WAL wake-ups never streamed from the primary: %v", err)
	}

	writerCtx, stopWriters := context.WithCancel(ctx)
	writers := make([]*foWriter, sc.writers)
	var writersDone sync.WaitGroup
	for i := range writers {
		writers[i] = &foWriter{pool: wpool, store: wstore, schema: schema}
		writersDone.Add(1)
		go func() {
			defer writersDone.Done()
			writers[i].run(writerCtx, time.Second*time.Duration(sc.writers)/time.Duration(sc.rate))
		}()
	}
	defer func() { stopWriters(); writersDone.Wait() }()
	committed := func() (ids []core.ID, at []time.Time, failed int) {
		for _, w := range writers {
			i, a, f := w.snapshot()
			ids, at, failed = append(ids, i...), append(at, a...), failed+f
		}
		return ids, at, failed
	}

	if err := waitUntil(ctx, 60*time.Second, func(context.Context) (bool, error) { return sink.distinct() >= sc.before, nil }); err != nil {
		t.Fatalf("%d events published before the failover, want %d: %v", sink.distinct(), sc.before, err)
	}

	// The failover: promote the replica, then the old primary dies.
	before := sink.distinct()
	pair.promote()
	promoted := time.Now()
	pair.stopPrimary()
	t.Logf("failover after %d events published: promoted, then the old primary stopped (immediate) %s later", before, time.Since(promoted).Round(time.Millisecond))
	// Times to resume count from the promotion: from then on the old
	// primary commits nothing (its commits wait for the replica, which
	// no longer follows it), and its connections die with it.
	failedAt := promoted

	newPrimary := pair.connect(ctx, pair.replica)
	defer newPrimary.Close(ctx)
	// Each relay publishes again, and its WAL wake-up streams from the new
	// primary.
	resume := make([]time.Duration, foRelays)
	if err := waitUntil(ctx, 30*time.Second, func(context.Context) (bool, error) {
		for i := range foRelays {
			if resume[i] == 0 {
				if at := sink.firstAfter(i, failedAt); !at.IsZero() {
					resume[i] = at.Sub(failedAt)
				}
			}
		}
		return !slices.Contains(resume, 0), nil
	}); err != nil {
		t.Fatalf("relays did not all publish again within 30s of the failover (time to resume per relay: %v)", resume)
	}
	walBack := make([]time.Duration, 0, foRelays)
	if err := waitUntil(ctx, 45*time.Second, func(ctx context.Context) (bool, error) {
		n, err := walStreams(ctx, newPrimary, failedAt, apps)
		if err == nil && n > len(walBack) {
			for range n - len(walBack) {
				walBack = append(walBack, time.Since(failedAt))
			}
		}
		return n == foRelays, err
	}); err != nil {
		t.Fatalf("%d of %d relays' WAL wake-ups stream from the new primary 45s after the failover: %v\nits sessions:\n%s", len(walBack), foRelays, err, activity(ctx, newPrimary))
	}
	_, at, _ := committed()
	firstCommit := time.Duration(0)
	for _, a := range at {
		if a.After(failedAt) {
			firstCommit = a.Sub(failedAt)
			break
		}
	}

	// More commits on the new primary, then drain.
	ids0, _, _ := committed()
	if err := waitUntil(ctx, 60*time.Second, func(context.Context) (bool, error) {
		ids, _, _ := committed()
		return len(ids)-len(ids0) >= sc.after, nil
	}); err != nil {
		t.Fatalf("writers committed too little after the failover: %v", err)
	}
	stopWriters()
	writersDone.Wait()
	ids, _, failedTx := committed()

	newStore, err := postgres.New(newPrimaryPool(t, pair), &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		st, err := newStore.Stats(ctx)
		return err == nil && st.Pending == 0 && st.Leased == 0, err
	}); err != nil {
		st, _ := newStore.Stats(ctx)
		t.Fatalf("outbox on the new primary not drained: %+v (%v)", st, err)
	}
	stopRelays()
	relaysDone.Wait()

	// Nothing committed lost: every commit the writers saw is published
	// and is on the new primary.
	lost := 0
	sink.mu.Lock()
	for _, id := range ids {
		if sink.pubs[id] == 0 {
			lost++
		}
	}
	republished := 0
	for _, n := range sink.pubs {
		republished += n - 1
	}
	published := slices.Collect(func(yield func(string) bool) {
		for id := range sink.pubs {
			if !yield(id.String()) {
				return
			}
		}
	})
	sink.mu.Unlock()
	var onNew, missingOrders, unpublishedRows int
	if err := newPrimary.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.orders WHERE event_id = ANY($1::uuid[])`, idStrings(ids)).Scan(&onNew); err != nil {
		t.Fatal(err)
	}
	// Nothing published that the new primary does not hold (no publish
	// from the old primary's last moments), and every row it holds is
	// published.
	if err := newPrimary.QueryRow(ctx, `SELECT count(*) FROM unnest($1::uuid[]) AS p(id) WHERE NOT EXISTS (SELECT FROM `+schema+`.orders o WHERE o.event_id = p.id)`, published).Scan(&missingOrders); err != nil {
		t.Fatal(err)
	}
	if err := newPrimary.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.orders o WHERE NOT (o.event_id = ANY($1::uuid[]))`, published).Scan(&unpublishedRows); err != nil {
		t.Fatal(err)
	}
	bound := foRelays * foConcurrency * foBatch
	t.Logf("summary: events committed %d (+%d commits that failed at the failover), published %d, lost %d, republished %d (bound %d), on the new primary %d",
		len(ids), failedTx, len(published), lost, republished, bound, onNew)
	t.Logf("resume: relays published again %v after the promotion; writers committed again after %s; WAL wake-ups streaming from the new primary after %v",
		roundAll(resume), firstCommit.Round(time.Millisecond), roundAll(walBack))
	switch {
	case lost > 0:
		t.Errorf("%d committed events were never published", lost)
	case onNew != len(ids):
		t.Errorf("the new primary holds %d of the %d committed orders", onNew, len(ids))
	case missingOrders > 0:
		t.Errorf("%d published events are not on the new primary", missingOrders)
	case unpublishedRows > 0:
		t.Errorf("%d orders on the new primary were never published", unpublishedRows)
	case republished > bound:
		t.Errorf("%d events republished, more than the %d in flight at the failover", republished, bound)
	}
	for i, d := range resume {
		if d > 15*time.Second {
			t.Errorf("relay %d took %s to publish again", i, d)
		}
	}
}

// walStreams counts the relays among apps whose WAL wake-up, started
// after since, streams from the server conn is on.
func walStreams(ctx context.Context, conn *pgx.Conn, since time.Time, apps []string) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `SELECT count(DISTINCT application_name) FROM pg_stat_activity
		WHERE application_name = ANY($1) AND backend_type = 'walsender' AND query LIKE 'START_REPLICATION%' AND backend_start > $2`,
		apps, since).Scan(&n)
	return n, err
}

// activity lists a server's sessions, for failure messages.
func activity(ctx context.Context, conn *pgx.Conn) string {
	rows, err := conn.Query(ctx, `SELECT application_name, backend_type, coalesce(state, ''), coalesce(wait_event_type || '/' || wait_event, ''),
		backend_start::text, left(query, 80) FROM pg_stat_activity WHERE application_name <> '' ORDER BY application_name`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var a, b, c, d, e, f string
		if err := rows.Scan(&a, &b, &c, &d, &e, &f); err != nil {
			return err.Error()
		}
		out += fmt.Sprintf("  %s %s %s %s %s %q\n", a, b, c, d, e, f)
	}
	return out
}

func newPrimaryPool(t *testing.T, p *scratchPair) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), p.url(p.replica))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func idStrings(ids []core.ID) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return s
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
