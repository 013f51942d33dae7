package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// The partition tests run three relays in this process on one outbox in
// the local PostgreSQL. Relay 0 is the one cut off; 1 and 2 are healthy.
const (
	ptRelays  = 3
	ptBatch   = 20
	ptLease   = 4 * time.Second
	ptPublish = 2500 * time.Millisecond
)

// leaseLog records every claim (its lease, from the store's clock) and
// every publish the transport accepted, per relay, so a test can check
// that no event was ever under two live leases and that each accepted
// publish happened while its relay's lease was live.
type leaseLog struct {
	mu     sync.Mutex
	leases []*leaseRec
	// current maps relay and event to the relay's latest lease of it.
	current [ptRelays]map[core.ID]*leaseRec
	pubs    map[core.ID][]pubRec
}

type leaseRec struct {
	relay int
	token core.ID
	start time.Time // Until - LeaseFor: the claim's time in the store's clock
	until time.Time
	// end is when the lease stopped keeping others off: until, or the
	// moment its relay began a settle that then succeeded (a lower bound
	// of its commit, so of any later claim).
	end map[core.ID]time.Time
	ids []core.ID
}

type pubRec struct {
	relay int
	at    time.Time
	lease *leaseRec
}

func newLeaseLog() *leaseLog {
	l := &leaseLog{pubs: make(map[core.ID][]pubRec)}
	for i := range l.current {
		l.current[i] = make(map[core.ID]*leaseRec)
	}
	return l
}

// store wraps relay i's store. It hides the store's optional interfaces
// (wake-ups, settle-and-claim): the relay polls and settles, then claims.
// untilOf reads a lease's expiry from the database where the batch lacks
// it (postgres.Store leaves Lease.Until zero on a batch its second claim
// filled, reported separately).
func (l *leaseLog) store(i int, s core.Store, untilOf func(ctx context.Context, token core.ID) (time.Time, error)) core.Store {
	return &loggedStore{Store: s, relay: i, log: l, untilOf: untilOf}
}

type loggedStore struct {
	core.Store
	relay   int
	log     *leaseLog
	untilOf func(ctx context.Context, token core.ID) (time.Time, error)
}

func (s *loggedStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	b, err := s.Store.Claim(ctx, req)
	if err == nil && len(b.Events) > 0 && b.Lease.Until.IsZero() {
		// Read before the relay can settle: Claim has not returned yet.
		if b.Lease.Until, err = s.untilOf(ctx, b.Lease.Token); err != nil {
			return b, fmt.Errorf("chaos: read the lease's expiry: %w", err)
		}
	}
	if err == nil && len(b.Events) > 0 {
		r := &leaseRec{relay: s.relay, token: b.Lease.Token, until: b.Lease.Until, start: b.Lease.Until.Add(-req.LeaseFor), end: map[core.ID]time.Time{}}
		s.log.mu.Lock()
		for _, e := range b.Events {
			r.ids = append(r.ids, e.ID)
			r.end[e.ID] = r.until
			s.log.current[s.relay][e.ID] = r
		}
		s.log.leases = append(s.log.leases, r)
		s.log.mu.Unlock()
	}
	return b, err
}

func (s *loggedStore) Settle(ctx context.Context, req core.SettleRequest) error {
	began := time.Now()
	err := s.Store.Settle(ctx, req)
	var lost map[core.ID]bool
	if ll := (*core.LeaseLostError)(nil); errors.As(err, &ll) {
		lost = map[core.ID]bool{}
		for _, id := range ll.IDs {
			lost[id] = true
		}
	} else if err != nil {
		return err // the lease lasts until it expires
	}
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	for _, r := range s.log.leases {
		if r.token != req.Lease.Token {
			continue
		}
		for _, o := range req.Outcomes {
			if !lost[o.ID] && began.Before(r.end[o.ID]) {
				r.end[o.ID] = began
			}
		}
	}
	return err
}

// publisher wraps relay i's publisher, recording what the transport
// accepted.
func (l *leaseLog) publisher(i int, next core.Publisher) core.Publisher {
	return core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		err := next.Publish(ctx, events)
		now := time.Now()
		l.mu.Lock()
		defer l.mu.Unlock()
		for k, perr := range core.EventErrors(len(events), err) {
			if perr == nil {
				id := events[k].ID
				l.pubs[id] = append(l.pubs[id], pubRec{relay: i, at: now, lease: l.current[i][id]})
			}
		}
		return err
	})
}

// check returns how many accepted publishes repeated an earlier one, and
// an error for any event that was under two live leases at once or
// accepted outside its relay's live lease.
func (l *leaseLog) check() (republished int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byEvent := map[core.ID][]*leaseRec{}
	for _, r := range l.leases {
		for _, id := range r.ids {
			byEvent[id] = append(byEvent[id], r)
		}
	}
	var errs []error
	for id, rs := range byEvent {
		sort.Slice(rs, func(a, b int) bool { return rs[a].start.Before(rs[b].start) })
		for k := 1; k < len(rs); k++ {
			if prev := rs[k-1]; rs[k].start.Before(prev.end[id]) {
				errs = append(errs, fmt.Errorf("event %s: relay %d claimed it at %s while relay %d's lease ran until %s",
					id, rs[k].relay, rs[k].start.Format(time.StampMicro), prev.relay, prev.end[id].Format(time.StampMicro)))
			}
		}
	}
	for id, ps := range l.pubs {
		republished += len(ps) - 1
		for _, p := range ps {
			switch {
			case p.lease == nil:
				errs = append(errs, fmt.Errorf("event %s: relay %d's publish was accepted at %s with no lease of it", id, p.relay, p.at.Format(time.StampMicro)))
			case p.at.After(p.lease.until):
				errs = append(errs, fmt.Errorf("event %s: relay %d's publish was accepted at %s, after its lease ran out at %s",
					id, p.relay, p.at.Format(time.StampMicro), p.lease.until.Format(time.StampMicro)))
			}
		}
	}
	return republished, errors.Join(errs...)
}

func (l *leaseLog) publishedBy(id core.ID, relay func(int) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pubs[id] {
		if relay(p.relay) {
			return true
		}
	}
	return false
}

func (l *leaseLog) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pubs)
}

// ptWorld is an outbox with a producer for the partition tests.
type ptWorld struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	store  *postgres.Store
	log    *leaseLog

	mu        sync.Mutex
	committed []core.ID
}

func newPTWorld(t *testing.T) *ptWorld {
	t.Helper()
	w := &ptWorld{t: t, pool: pgtest.Pool(t, 10), log: newLeaseLog()}
	w.schema = pgtest.Schema(t, w.pool, "partition")
	ctx := context.Background()
	if err := postgres.Migrate(ctx, w.pool, &postgres.MigrateConfig{Schema: w.schema}); err != nil {
		t.Fatal(err)
	}
	var err error
	if w.store, err = postgres.New(w.pool, &postgres.Config{Schema: w.schema}); err != nil {
		t.Fatal(err)
	}
	return w
}

// produce commits rate events a second until ctx ends.
func (w *ptWorld) produce(ctx context.Context, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
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
		if err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { return w.store.Add(ctx, tx, e) }); err != nil {
			if ctx.Err() == nil {
				w.t.Errorf("producer: %v", err)
			}
			return
		}
		w.mu.Lock()
		w.committed = append(w.committed, e.ID)
		w.mu.Unlock()
	}
}

// preload commits n events at once, so the relays' first batches are full.
func (w *ptWorld) preload(n int) {
	ctx := context.Background()
	events := make([]core.Event, n)
	for i := range events {
		e, err := core.NewEvent("order.placed", map[string]int{"preloaded": i})
		if err != nil {
			w.t.Fatal(err)
		}
		events[i] = e
	}
	if err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { return w.store.Add(ctx, tx, events...) }); err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range events {
		w.committed = append(w.committed, e.ID)
	}
}

func (w *ptWorld) committedIDs() []core.ID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.committed)
}

// startRelay runs relay i on pool (through a proxy, or not) until the test
// ends, with hooks receiving each settle's outcome.
func (w *ptWorld) startRelay(i int, pool *pgxpool.Pool, pub core.Publisher, hooks ...core.RelayHook) {
	t := w.t
	t.Helper()
	store, err := postgres.New(pool, &postgres.Config{Schema: w.schema, Wakeup: postgres.WakeupPoll})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("relay", i)
	untilOf := func(ctx context.Context, token core.ID) (time.Time, error) {
		var until time.Time
		err := w.pool.QueryRow(ctx, `SELECT max(lease_until) FROM `+pgx.Identifier{w.schema, "outbox_events"}.Sanitize()+` WHERE lease_token = $1`, token.String()).Scan(&until)
		return until, err
	}
	relay, err := core.NewRelay(w.log.store(i, store, untilOf), w.log.publisher(i, pub), &core.RelayConfig{
		BatchSize: ptBatch, Concurrency: 1, LeaseDuration: ptLease, PublishTimeout: ptPublish,
		PollInterval: 100 * time.Millisecond, ShutdownTimeout: time.Second,
		Retry: core.RetryPolicy{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
		Hooks: hooks, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := relay.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("relay %d: %v", i, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// drain waits until nothing is pending and every committed event was
// published, and returns how many were never published.
func (w *ptWorld) drain(d time.Duration) (lost int) {
	t := w.t
	t.Helper()
	ctx := context.Background()
	err := waitUntil(ctx, d, func(ctx context.Context) (bool, error) {
		st, err := w.store.Stats(ctx)
		return err == nil && st.Pending == 0 && st.Leased == 0, err
	})
	if err != nil {
		st, _ := w.store.Stats(ctx)
		t.Fatalf("outbox not drained: %+v (%v)", st, err)
	}
	for _, id := range w.committedIDs() {
		if !w.log.publishedBy(id, func(int) bool { return true }) {
			lost++
		}
	}
	return lost
}

// proxiedPool is a pool like pgtest's whose connections go through proxy.
func proxiedPool(t *testing.T, proxy *blackholeProxy, app string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.addr().Port)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// settleWatch reports the settle outcome of a batch holding a given event.
type settleWatch struct {
	mu     sync.Mutex
	target core.ID
	got    chan error
}

func (s *settleWatch) watch(id core.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.target = id
}

func (s *settleWatch) AfterSettle(_ context.Context, info core.SettleInfo) {
	s.mu.Lock()
	target := s.target
	s.mu.Unlock()
	for _, e := range info.Events {
		if e.ID == target {
			select {
			case s.got <- info.Err:
			default:
			}
			return
		}
	}
}

// TestPartitionedFromDatabaseWhileHoldingLeases cuts relay 0 off from
// PostgreSQL (a proxy that blackholes its connections: no reset, no
// error, only silence) right after the transport accepted one of its
// batches, before it could settle it. Relays 1 and 2 must publish that
// batch once its lease expires; when the partition heals, relay 0's
// settle finally reaches the database and must be refused (the lease
// token moved on); no event may ever be under two live leases, and
// nothing may be lost.
func TestPartitionedFromDatabaseWhileHoldingLeases(t *testing.T) {
	t.Parallel()
	w := newPTWorld(t)
	proxy := newBlackholeProxy(t, net.JoinHostPort(pgHost(t), pgPort(t)))

	var (
		cutBatch  []core.ID
		cutAt     time.Time
		cutSignal = make(chan struct{})
		accepted  atomic.Int32
	)
	// Relay 0's transport accepts its batch; the partition starts before
	// the relay can settle it, and the transport answers 2s late (inside
	// the publish timeout), so the settle is sent into the black hole
	// well before the lease expires, and is still waiting after others
	// have taken the events over.
	var cutOnce sync.Once
	cutter := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		if accepted.Add(1) != 3 {
			return nil
		}
		cutOnce.Do(func() {
			for _, e := range events {
				cutBatch = append(cutBatch, e.ID)
			}
			proxy.cut()
			cutAt = time.Now()
			close(cutSignal)
		})
		hold(ctx, 2*time.Second)
		return nil
	})
	w.preload(600)
	watch := &settleWatch{got: make(chan error, 1)}
	w.startRelay(0, proxiedPool(t, proxy, "partition-relay-0"), cutter, watch)
	for i := 1; i < ptRelays; i++ {
		w.startRelay(i, w.pool, core.PublisherFunc(func(context.Context, []core.Event) error { return nil }))
	}
	prodCtx, stopProducing := context.WithCancel(context.Background())
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); w.produce(prodCtx, 150) }()
	defer func() { stopProducing(); <-prodDone }()

	select {
	case <-cutSignal:
	case <-time.After(30 * time.Second):
		t.Fatal("relay 0 never published three batches")
	}
	watch.watch(cutBatch[0])
	t.Logf("relay 0 cut off from PostgreSQL holding a lease on %d published, unsettled events", len(cutBatch))

	// The others take the batch over once the lease has expired.
	others := func(r int) bool { return r != 0 }
	if err := waitUntil(context.Background(), 3*ptLease, func(context.Context) (bool, error) {
		for _, id := range cutBatch {
			if !w.log.publishedBy(id, others) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the other relays never published relay 0's batch: %v", err)
	}
	takenAfter := time.Since(cutAt)
	select {
	case err := <-watch.got:
		t.Fatalf("relay 0's settle came back during the partition: %v", err)
	default:
	}
	proxy.heal()
	healedAt := time.Now()
	var lateErr error
	select {
	case lateErr = <-watch.got:
	case <-time.After(10 * time.Second):
		t.Fatal("relay 0's settle never came back after the partition healed")
	}
	var ll *core.LeaseLostError
	if !errors.As(lateErr, &ll) || len(ll.IDs) != len(cutBatch) {
		t.Fatalf("relay 0's late settle: %v; want the lease lost for all %d events", lateErr, len(cutBatch))
	}
	t.Logf("relay 0's late settle, %s after the heal: refused (%d events, lease lost)", time.Since(healedAt).Round(time.Millisecond), len(ll.IDs))

	// Relay 0 works again; more events, then drain.
	n0 := w.log.distinct()
	if err := waitUntil(context.Background(), 30*time.Second, func(context.Context) (bool, error) {
		return w.log.distinct() > n0+300, nil
	}); err != nil {
		t.Fatal(err)
	}
	stopProducing()
	<-prodDone
	lost := w.drain(30 * time.Second)
	republished, err := w.log.check()
	if err != nil {
		t.Error(err)
	}
	t.Logf("summary: events %d, lost %d, republished %d (the cut-off batch: %d), taken over %s after the cut (lease %s)",
		len(w.committedIDs()), lost, republished, len(cutBatch), takenAfter.Round(time.Millisecond), ptLease)
	if lost > 0 {
		t.Errorf("%d committed events never published", lost)
	}
	if republished != len(cutBatch) {
		t.Errorf("%d events republished; only the %d of the cut-off batch should be", republished, len(cutBatch))
	}
}

func pgHost(t *testing.T) string {
	cfg, err := pgx.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Host
}

func pgPort(t *testing.T) string {
	cfg, err := pgx.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(int(cfg.Port))
}

// TestLeaseLogCheckFindsWhatItMust breaks a lease history on purpose: a
// claim inside another relay's live lease, and a publish accepted after
// its lease ran out, must each be reported; a claim after a settle that
// ended the lease early must not.
func TestLeaseLogCheckFindsWhatItMust(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	id := core.NewID()
	mk := func(relay int, start time.Time) *leaseRec {
		r := &leaseRec{relay: relay, token: core.NewID(), start: start, until: start.Add(ptLease), end: map[core.ID]time.Time{}, ids: []core.ID{id}}
		r.end[id] = r.until
		return r
	}
	check := func(leases []*leaseRec, pubs []pubRec) error {
		l := newLeaseLog()
		l.leases = leases
		l.pubs[id] = pubs
		_, err := l.check()
		return err
	}
	a, b := mk(0, t0), mk(1, t0.Add(ptLease/2))
	if err := check([]*leaseRec{a, b}, []pubRec{{0, t0.Add(time.Second), a}}); err == nil {
		t.Error("a claim inside another relay's live lease was not reported")
	}
	a.end[id] = t0.Add(ptLease / 4) // settled (retry) before b claimed
	if err := check([]*leaseRec{a, b}, []pubRec{{1, b.start.Add(time.Second), b}}); err != nil {
		t.Errorf("a claim after a settle that ended the lease: %v", err)
	}
	if err := check([]*leaseRec{a}, []pubRec{{0, a.until.Add(time.Millisecond), a}}); err == nil {
		t.Error("a publish accepted after its lease ran out was not reported")
	}
	if err := check([]*leaseRec{a}, []pubRec{{0, t0, nil}}); err == nil {
		t.Error("a publish with no lease was not reported")
	}
}
