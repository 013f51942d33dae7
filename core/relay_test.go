package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
)

var start = time.Date(2031, 5, 1, 8, 0, 0, 0, time.UTC)

// relayFixture runs a relay over a memory store on a fake clock.
type relayFixture struct {
	t     *testing.T
	clock *coretest.FakeClock
	store *memory.Store
	pub   *memory.Publisher
	relay *core.Relay
	stop  context.CancelFunc
	done  chan error
}

func newRelayFixture(t *testing.T, store *memory.Store, pub core.Publisher, cfg core.RelayConfig) *relayFixture {
	t.Helper()
	f := &relayFixture{t: t, clock: coretest.NewFakeClock(start), store: store}
	if store == nil {
		f.store = memory.NewStore(&memory.StoreConfig{Clock: f.clock})
	}
	if pub == nil {
		f.pub = memory.NewPublisher()
		pub = f.pub
	}
	cfg.Clock = f.clock
	r, err := core.NewRelay(f.store, pub, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.relay = r
	return f
}

func (f *relayFixture) run() {
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	f.done = make(chan error, 1)
	go func() { f.done <- f.relay.Run(ctx) }()
	f.t.Cleanup(func() { f.shutdown() })
}

// shutdown cancels Run and waits for it to return.
func (f *relayFixture) shutdown() {
	if f.stop == nil {
		return
	}
	f.stop()
	f.stop = nil
	if err := <-f.done; err != nil {
		f.t.Errorf("Run returned %v", err)
	}
}

// idle waits until every worker waits on its poll timer.
func (f *relayFixture) idle(workers int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.clock.WaitForTimers(ctx, workers); err != nil {
		f.t.Fatalf("relay workers never went idle: %v", err)
	}
}

func (f *relayFixture) add(n int) []core.Event {
	f.t.Helper()
	events := make([]core.Event, n)
	for i := range events {
		e, err := core.NewEvent("order.placed", map[string]int{"n": i})
		if err != nil {
			f.t.Fatal(err)
		}
		events[i] = e
	}
	if err := f.store.Add(context.Background(), events...); err != nil {
		f.t.Fatal(err)
	}
	return events
}

func waitPublished(t *testing.T, pub *memory.Publisher, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.WaitFor(ctx, n); err != nil {
		t.Fatalf("only %d of %d events published: %v", pub.Count(), n, err)
	}
}

func TestRelayDeliversBacklogAtStart(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{BatchSize: 10})
	f.add(35)
	f.run()
	waitPublished(t, f.pub, 35)
	f.idle(2)
	st, err := f.store.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 {
		t.Fatalf("%d events still pending after delivery", st.Pending)
	}
}

func TestRelayWakesOnNotification(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{})
	f.run()
	f.idle(2)
	// The clock does not move: only the store's wake-up can trigger delivery.
	f.add(3)
	waitPublished(t, f.pub, 3)
}

func TestRelayPollsWithoutNotifier(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{DisableNotifier: true, PollInterval: 5 * time.Second, Concurrency: 1})
	f.run()
	f.idle(1)
	f.add(4)
	if got := f.pub.Calls(); got != 0 {
		t.Fatalf("publisher called %d times with notifications off and the clock stopped", got)
	}
	f.clock.Advance(5 * time.Second)
	waitPublished(t, f.pub, 4)
}

func TestRelayRetriesAfterBackoff(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{
		Concurrency: 1, PollInterval: time.Second,
		Retry: core.RetryPolicy{InitialBackoff: 10 * time.Second, DisableJitter: true},
	})
	var mu sync.Mutex
	failures := 0
	f.pub.FailWith(func(core.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if failures == 0 {
			failures++
			return errors.New("transport down")
		}
		return nil
	})
	events := f.add(1)
	f.run()
	f.idle(1)
	// Polls before the backoff has passed find nothing due.
	for i := 0; i < 9; i++ {
		f.clock.Advance(time.Second)
		f.idle(1)
	}
	if n := f.pub.Count(); n != 0 {
		t.Fatalf("event published %d times before its backoff ended", n)
	}
	f.clock.Advance(1100 * time.Millisecond)
	waitPublished(t, f.pub, 1)
	if got := f.pub.Published()[0]; got.ID != events[0].ID || got.Attempts != 2 {
		t.Fatalf("published %s at attempt %d, want %s at attempt 2", got.ID, got.Attempts, events[0].ID)
	}
}

func TestRelayRunsBatchesConcurrently(t *testing.T) {
	const workers = 4
	var mu sync.Mutex
	inFlight, peak := 0, 0
	release := make(chan struct{})
	arrived := make(chan struct{}, workers)
	inner := memory.NewPublisher()
	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		arrived <- struct{}{}
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
		return inner.Publish(ctx, events)
	})
	f := newRelayFixture(t, nil, pub, core.RelayConfig{BatchSize: 1, Concurrency: workers})
	f.add(workers)
	f.run()
	for i := 0; i < workers; i++ {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d batches in flight at once", i, workers)
		}
	}
	close(release)
	waitPublished(t, inner, workers)
	if peak != workers {
		t.Fatalf("peak concurrency %d, want %d", peak, workers)
	}
}

func TestRelayShutdownFinishesInFlightPublish(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	inner := memory.NewPublisher()
	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		close(entered)
		<-release
		return inner.Publish(ctx, events)
	})
	f := newRelayFixture(t, nil, pub, core.RelayConfig{Concurrency: 1})
	events := f.add(1)
	f.run()
	<-entered
	f.stop() // stop claiming; the publish in flight may finish
	close(release)
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	f.stop = nil
	st, ok := f.store.Get(events[0].ID)
	if !ok || st.PublishedAt.IsZero() {
		t.Fatalf("in-flight event not settled as published on shutdown: %+v", st)
	}
}

func TestRelayShutdownReleasesStuckPublish(t *testing.T) {
	entered := make(chan struct{})
	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		close(entered)
		<-ctx.Done() // a transport that hangs until cancelled
		return ctx.Err()
	})
	f := newRelayFixture(t, nil, pub, core.RelayConfig{Concurrency: 1, ShutdownTimeout: 3 * time.Second, PublishTimeout: 20 * time.Second})
	events := f.add(1)
	f.run()
	<-entered
	f.stop()
	// Run now waits ShutdownTimeout for the stuck publish: one timer (the
	// shutdown deadline) besides the publish's own timeout.
	f.idle(1)
	f.clock.Advance(3 * time.Second)
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	f.stop = nil
	st, _ := f.store.Get(events[0].ID)
	if !st.PublishedAt.IsZero() || !st.DeadAt.IsZero() || st.Event.Attempts != 0 || !st.LeaseUntil.IsZero() {
		t.Fatalf("stuck event not released untouched: %+v", st)
	}
}

func TestRelayRecoversPanickingPublisher(t *testing.T) {
	pub := core.PublisherFunc(func(context.Context, []core.Event) error { panic("bug in transport") })
	f := newRelayFixture(t, nil, pub, core.RelayConfig{Retry: core.RetryPolicy{MaxAttempts: 1}})
	events := f.add(1)
	if _, err := f.relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := f.store.Get(events[0].ID)
	if st.DeadAt.IsZero() || st.LastError == "" {
		t.Fatalf("panicking publish not recorded as a failure: %+v", st)
	}
}

func TestRelayPartialBatchFailure(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{Retry: core.RetryPolicy{DisableJitter: true}})
	events := f.add(3)
	f.pub.FailWith(func(e core.Event) error {
		if e.ID == events[1].ID {
			return core.Permanent(errors.New("rejected"))
		}
		return nil
	})
	if _, err := f.relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, e := range events {
		st, _ := f.store.Get(e.ID)
		published, dead := !st.PublishedAt.IsZero(), !st.DeadAt.IsZero()
		if i == 1 && (!dead || published) || i != 1 && (!published || dead) {
			t.Fatalf("event %d: published=%v dead=%v", i, published, dead)
		}
	}
}

func TestRelayConfigValidation(t *testing.T) {
	store, pub := memory.NewStore(nil), memory.NewPublisher()
	for name, cfg := range map[string]core.RelayConfig{
		"publish timeout not shorter than lease": {LeaseDuration: time.Second, PublishTimeout: time.Second},
		"negative batch":                         {BatchSize: -1},
		"zero attempts":                          {Retry: core.RetryPolicy{MaxAttempts: -1}},
		"jitter out of range":                    {Retry: core.RetryPolicy{Jitter: 1.5}},
	} {
		if _, err := core.NewRelay(store, pub, &cfg); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := core.NewRelay(nil, pub, nil); err == nil {
		t.Error("nil store accepted")
	}
	r, err := core.NewRelay(store, pub, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config(); c.PublishTimeout >= c.LeaseDuration || c.BatchSize != 100 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestRelayRunTwiceIsRefused(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{Concurrency: 1})
	f.run()
	f.idle(1)
	if err := f.relay.Run(context.Background()); err == nil {
		t.Fatal("second concurrent Run accepted")
	}
}

func TestRelayReleasesEventsNotAttempted(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{Retry: core.RetryPolicy{MaxAttempts: 1}})
	events := f.add(2)
	f.pub.FailWith(func(e core.Event) error {
		if e.ID == events[1].ID {
			return core.NotAttempted(errors.New("consumer stopped taking events"))
		}
		return nil
	})
	if _, err := f.relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := f.store.Get(events[1].ID)
	// With MaxAttempts 1 a counted failure would have dead-lettered it.
	if !st.DeadAt.IsZero() || !st.PublishedAt.IsZero() || st.Event.Attempts != 0 {
		t.Fatalf("event not attempted was not released untouched: %+v", st)
	}
}

func TestRelayNegativeShutdownTimeoutCancelsAtOnce(t *testing.T) {
	entered := make(chan struct{})
	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	})
	f := newRelayFixture(t, nil, pub, core.RelayConfig{Concurrency: 1, ShutdownTimeout: -1})
	events := f.add(1)
	f.run()
	<-entered
	f.stop()
	// No clock movement: the publish must be cancelled without waiting.
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	f.stop = nil
	if st, _ := f.store.Get(events[0].ID); st.Event.Attempts != 0 || !st.LeaseUntil.IsZero() {
		t.Fatalf("event not released: %+v", st)
	}
}

func TestRelayDeadLettersInvalidRowsWithoutPublishing(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{})
	events := f.add(3)
	// A store hands back whatever another service wrote; simulate a row
	// whose type is empty by wrapping the store's claim.
	bad := events[1].ID
	relay, err := core.NewRelay(claimMutator{f.store, func(e *core.Event) {
		if e.ID == bad {
			e.Type = ""
		}
	}}, f.pub, &core.RelayConfig{Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.pub.Published(); len(got) != 2 || got[0].ID == bad || got[1].ID == bad {
		t.Fatalf("published %d events (want the 2 valid ones): %+v", len(got), got)
	}
	st, _ := f.store.Get(bad)
	if st.DeadAt.IsZero() || !strings.Contains(st.LastError, "Type") {
		t.Fatalf("invalid event not dead-lettered with its reason: %+v", st)
	}
}

type claimMutator struct {
	*memory.Store
	mutate func(*core.Event)
}

func (c claimMutator) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	b, err := c.Store.Claim(ctx, req)
	for i := range b.Events {
		c.mutate(&b.Events[i])
	}
	return b, err
}

// TestRelayParsesPayloadsUnlessTheStoreVouches: a payload that is not JSON
// is dead-lettered, unless the batch says the store guarantees JSON (then
// the relay trusts it, and every other check still applies).
func TestRelayParsesPayloadsUnlessTheStoreVouches(t *testing.T) {
	for _, vouched := range []bool{false, true} {
		t.Run(fmt.Sprintf("PayloadsAreJSON=%v", vouched), func(t *testing.T) {
			f := newRelayFixture(t, nil, nil, core.RelayConfig{})
			events := f.add(3)
			notJSON, noType := events[0].ID, events[2].ID
			relay, err := core.NewRelay(vouchingStore{claimMutator{f.store, func(e *core.Event) {
				switch e.ID {
				case notJSON:
					e.Payload = []byte("{not json")
				case noType:
					e.Type = ""
				}
			}}, vouched}, f.pub, &core.RelayConfig{Clock: f.clock})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := relay.Drain(context.Background()); err != nil {
				t.Fatal(err)
			}
			st, _ := f.store.Get(notJSON)
			if dead := !st.DeadAt.IsZero(); dead == vouched {
				t.Fatalf("non-JSON payload dead-lettered=%v with PayloadsAreJSON=%v: %+v", dead, vouched, st)
			}
			if st, _ := f.store.Get(noType); st.DeadAt.IsZero() {
				t.Fatalf("event without a type not dead-lettered: %+v", st)
			}
		})
	}
}

type vouchingStore struct {
	claimMutator
	vouch bool
}

func (v vouchingStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	b, err := v.claimMutator.Claim(ctx, req)
	b.PayloadsAreJSON = v.vouch
	return b, err
}
