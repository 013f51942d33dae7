package coretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// FaultOptions tunes TestFaults.
type FaultOptions struct {
	// Events is how many events each scenario writes. Defaults to 200.
	Events int
	// BatchSize is the relays' batch size. Defaults to 10.
	BatchSize int
}

// TestFaults runs crash and fault scenarios against a store, with relays on a
// fake clock, and checks the promise outboxkit makes: no event is lost, every
// effect is applied exactly once through the consumer's deduplication, every
// event ends published or dead-lettered, and redeliveries stay within one
// batch per crash.
//
// Custom stores run it beside TestStore. A custom Publisher is covered by
// passing it to TestPublisher; the relay-side faults here do not depend on it.
func TestFaults(t *testing.T, newStore StoreFactory, opts FaultOptions) {
	t.Helper()
	if opts.Events == 0 {
		opts.Events = 200
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = 10
	}

	t.Run("RelayCrashesBeforeSettling", func(t *testing.T) {
		h := newFaultHarness(t, newStore, opts)
		const crashes = 5
		for i := 0; i < crashes; i++ {
			// A relay claims and publishes a batch, then dies before settling:
			// its lease must expire and another relay publish the batch again.
			h.crashAfterPublish()
		}
		h.advance(lease + time.Second)
		h.drain()
		h.check(t, crashes*opts.BatchSize)
	})

	t.Run("RelayCrashesBeforePublishing", func(t *testing.T) {
		h := newFaultHarness(t, newStore, opts)
		for i := 0; i < 3; i++ {
			h.crashAfterClaim()
		}
		// Nothing reaches the consumer until the leases expire.
		h.drain()
		h.advance(lease + time.Second)
		h.drain()
		h.check(t, 0)
	})

	t.Run("ShutdownDuringClaim", func(t *testing.T) {
		h := newFaultHarness(t, newStore, opts)
		for i := 0; i < 3; i++ {
			// The relay is told to stop while its claim is in flight: the
			// claim commits, and the relay must hand the batch back at once
			// rather than leave it leased until the lease expires.
			h.shutdownDuringClaim()
		}
		// No clock movement: a batch left under its lease is never drained.
		h.drain()
		h.check(t, 0)
	})

	t.Run("TransportOutage", func(t *testing.T) {
		h := newFaultHarness(t, newStore, opts)
		h.transport.setDown(true) // 5xx storm: every publish fails
		for i := 0; i < 4; i++ {
			h.drain()
			h.advance(10 * time.Second)
		}
		h.transport.setDown(false)
		for i := 0; i < 10; i++ {
			h.advance(time.Minute)
			h.drain()
		}
		h.check(t, 0)
	})

	t.Run("StoreFailsToSettle", func(t *testing.T) {
		h := newFaultHarness(t, newStore, opts)
		h.store.failSettles(2) // the database is unreachable for two settles
		h.drain()
		h.advance(lease + time.Second)
		h.drain()
		h.check(t, 2*opts.BatchSize)
	})

	t.Run("ConsumerCrashesAfterCommit", func(t *testing.T) {
		h := newFaultHarness(t, newStore, opts)
		// The consumer commits its effect for every third event and then
		// fails to answer: the transport reports an error and the event is
		// published again; the deduper must absorb it.
		h.transport.crashAfterCommit(3)
		for i := 0; i < 10; i++ {
			h.drain()
			h.advance(time.Minute)
		}
		h.check(t, opts.Events/3+1)
	})

	t.Run("PoisonEventDoesNotStopTheFlow", func(t *testing.T) {
		h := newFaultHarness(t, newStore, opts)
		poison := h.ids[len(h.ids)/2]
		h.transport.poison(poison)
		for i := 0; i < 20; i++ {
			h.drain()
			h.advance(time.Hour)
		}
		if got := h.transport.applied(poison); got != 0 {
			t.Fatalf("poison event applied %d times", got)
		}
		h.check(t, 0, poison)
	})
}

// faultHarness wires a store (wrapped to inject settle failures), a relay
// on a fake clock, and a transport that delivers to a deduplicating consumer.
type faultHarness struct {
	t         *testing.T
	clock     *FakeClock
	store     *faultyStore
	transport *faultyTransport
	relay     *core.Relay
	opts      FaultOptions
	ids       []core.ID
	crashes   int
}

func newFaultHarness(t *testing.T, newStore StoreFactory, opts FaultOptions) *faultHarness {
	t.Helper()
	s, write := newStore(t, StoreOptions{})
	h := &faultHarness{t: t, clock: NewFakeClock(t0.Add(time.Minute)), store: &faultyStore{Store: s}, opts: opts}
	h.transport = newFaultyTransport()
	r, err := core.NewRelay(h.store, h.transport, &core.RelayConfig{
		Clock: h.clock, BatchSize: opts.BatchSize, LeaseDuration: lease, PublishTimeout: lease / 2,
		Retry: core.RetryPolicy{MaxAttempts: 8, InitialBackoff: time.Second, MaxBackoff: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.relay = r
	events := make([]core.Event, opts.Events)
	for i := range events {
		events[i] = newEvent("fault", t0.Add(time.Duration(i)*time.Millisecond))
		h.ids = append(h.ids, events[i].ID)
	}
	if err := write(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *faultHarness) advance(d time.Duration) { h.clock.Advance(d) }

func (h *faultHarness) drain() {
	h.t.Helper()
	// A settle failure surfaces as an error; like a real relay, carry on.
	for i := 0; i < 1000; i++ {
		n, err := h.relay.Drain(context.Background())
		if err == nil {
			return
		}
		if !errors.Is(err, errInjected) {
			h.t.Fatalf("Drain: %v", err)
		}
		_ = n
	}
}

func (h *faultHarness) claim() core.Batch {
	h.t.Helper()
	b, err := h.store.Claim(context.Background(), core.ClaimRequest{Limit: h.opts.BatchSize, LeaseFor: lease, Now: h.clock.Now()})
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

func (h *faultHarness) crashAfterPublish() {
	h.t.Helper()
	b := h.claim()
	_ = h.transport.Publish(context.Background(), b.Events)
	h.crashes++
}

// shutdownDuringClaim runs a Drain whose context is cancelled from inside
// its first claim, after the store committed it.
func (h *faultHarness) shutdownDuringClaim() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.store.cancelDuringNextClaim(cancel)
	n, err := h.relay.Drain(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		h.t.Fatalf("Drain cancelled during its claim: %v", err)
	}
	if n != 0 {
		h.t.Fatalf("Drain cancelled during its claim settled %d events, want 0", n)
	}
}

func (h *faultHarness) crashAfterClaim() {
	h.claim()
	h.crashes++
}

// check asserts the outcome: every event but the poisoned ones applied once,
// and no more redeliveries than maxRedeliveries.
func (h *faultHarness) check(t *testing.T, maxRedeliveries int, poisoned ...core.ID) {
	t.Helper()
	skip := make(map[core.ID]bool)
	for _, id := range poisoned {
		skip[id] = true
	}
	lost, doubles := 0, 0
	for _, id := range h.ids {
		if skip[id] {
			continue
		}
		switch n := h.transport.applied(id); {
		case n == 0:
			lost++
		case n > 1:
			doubles++
		}
	}
	redeliveries := h.transport.redeliveries()
	t.Logf("events=%d crashes=%d deliveries=%d redeliveries=%d lost=%d double-effects=%d",
		len(h.ids), h.crashes, h.transport.deliveries(), redeliveries, lost, doubles)
	if lost != 0 || doubles != 0 {
		t.Fatalf("lost %d events and applied %d effects twice; want 0 and 0", lost, doubles)
	}
	if redeliveries > maxRedeliveries {
		t.Fatalf("%d redeliveries, bound is %d", redeliveries, maxRedeliveries)
	}
	// Nothing may remain claimable: every event is published or dead-lettered.
	b, err := h.store.Claim(context.Background(), core.ClaimRequest{Limit: len(h.ids) + 1, LeaseFor: lease, Now: h.clock.Now().Add(365 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 0 {
		t.Fatalf("%d events neither published nor dead-lettered", len(b.Events))
	}
}

var errInjected = errors.New("coretest: injected fault")

// faultyStore fails the next n Settle calls without applying them, as a
// database connection lost at the wrong moment would, and can cancel a
// relay's context in the middle of a claim.
type faultyStore struct {
	core.Store
	mu       sync.Mutex
	failNext int
	cancel   func()
}

// cancelDuringNextClaim makes the next Claim call cancel, then claim, then
// answer as a database client does when its context was cancelled while the
// server committed: with the context's error and without the batch.
func (s *faultyStore) cancelDuringNextClaim(cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel = cancel
}

func (s *faultyStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	s.mu.Lock()
	cancel := s.cancel
	s.cancel = nil
	s.mu.Unlock()
	if cancel == nil {
		return s.Store.Claim(ctx, req)
	}
	cancel()
	b, err := s.Store.Claim(context.WithoutCancel(ctx), req)
	if err == nil && ctx.Err() != nil {
		return core.Batch{}, ctx.Err()
	}
	return b, err
}

func (s *faultyStore) failSettles(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = n
}

func (s *faultyStore) Settle(ctx context.Context, req core.SettleRequest) error {
	s.mu.Lock()
	fail := s.failNext > 0
	if fail {
		s.failNext--
	}
	s.mu.Unlock()
	if fail {
		return errInjected
	}
	return s.Store.Settle(ctx, req)
}

// faultyTransport delivers each event to a consumer that applies it through a
// deduper, counting deliveries and effects.
type faultyTransport struct {
	mu          sync.Mutex
	down        bool
	crashEvery  int
	poisoned    map[core.ID]bool
	effects     map[core.ID]int
	seen        map[core.ID]int
	delivered   int
	sinceCommit int
}

func newFaultyTransport() *faultyTransport {
	return &faultyTransport{poisoned: map[core.ID]bool{}, effects: map[core.ID]int{}, seen: map[core.ID]int{}}
}

func (f *faultyTransport) setDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }
func (f *faultyTransport) crashAfterCommit(every int) {
	f.mu.Lock()
	f.crashEvery = every
	f.mu.Unlock()
}
func (f *faultyTransport) poison(id core.ID) { f.mu.Lock(); f.poisoned[id] = true; f.mu.Unlock() }
func (f *faultyTransport) applied(id core.ID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.effects[id]
}
func (f *faultyTransport) deliveries() int { f.mu.Lock(); defer f.mu.Unlock(); return f.delivered }

// redeliveries counts deliveries of events that had already been delivered.
func (f *faultyTransport) redeliveries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.seen {
		if c > 1 {
			n += c - 1
		}
	}
	return n
}

func (f *faultyTransport) Publish(ctx context.Context, events []core.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("503 service unavailable")
	}
	be := core.NewBatchError(len(events))
	for i, e := range events {
		if f.poisoned[e.ID] {
			be.Set(i, fmt.Errorf("consumer rejects event %s", e.ID))
			continue
		}
		f.delivered++
		f.seen[e.ID]++
		// The consumer's deduplicated effect: applied only the first time.
		if f.effects[e.ID] == 0 {
			f.effects[e.ID]++
			f.sinceCommit++
			if f.crashEvery > 0 && f.sinceCommit%f.crashEvery == 0 && f.seen[e.ID] == 1 {
				be.Set(i, errors.New("consumer crashed after committing"))
			}
			continue
		}
		// A duplicate: the deduper recognises the event ID and the consumer
		// answers success without applying anything.
	}
	return be.ErrOrNil()
}
