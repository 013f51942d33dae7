package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
)

// interruptingStore begins a shutdown from inside its at-th claim, at the
// moment a real database has committed the claim but not yet answered it.
// Like a real client, it then reports the cancellation instead of the batch
// if the context it was handed is done: the claimed rows stay leased with no
// relay left to settle them. The relay must therefore never hand a claim a
// context that shutdown cancels.
//
// It embeds core.Store, hiding memory.Store's SettleAndClaim, so the relay
// takes the Settle-then-Claim path.
type interruptingStore struct {
	core.Store
	shutdown func()

	mu     sync.Mutex
	claims int
	at     int
}

func (s *interruptingStore) interrupt() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	return s.claims == s.at
}

func (s *interruptingStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	if s.interrupt() {
		s.shutdown()
	}
	b, err := s.Store.Claim(context.WithoutCancel(ctx), req) // committed, whatever ctx says now
	if err == nil && ctx.Err() != nil {
		return core.Batch{}, ctx.Err()
	}
	return b, err
}

// pipelinedInterruptingStore is interruptingStore with SettleAndClaim, which
// counts as a claim and begins the shutdown between its settle and its claim.
type pipelinedInterruptingStore struct {
	*interruptingStore
	inner core.SettleClaimer
}

func (s pipelinedInterruptingStore) SettleAndClaim(ctx context.Context, sreq core.SettleRequest, creq core.ClaimRequest) (core.Batch, error, error) {
	if err := s.Settle(ctx, sreq); err != nil {
		return core.Batch{}, err, err
	}
	b, err := s.Claim(ctx, creq)
	return b, nil, err
}

// TestRelayShutdownDuringClaimReleasesTheBatch begins a shutdown inside each
// claim a relay makes (its first, the one after a settle, the claimed half of
// SettleAndClaim, and a Drain's) and checks that the batch that claim leased
// is handed back at once: not published, attempts restored, no lease left.
func TestRelayShutdownDuringClaimReleasesTheBatch(t *testing.T) {
	const batch = 2
	for _, tc := range []struct {
		name      string
		at        int  // the claim that begins the shutdown
		pipelined bool // the store implements SettleClaimer
		drain     bool // Drain with a cancelled ctx rather than Run
		published int  // events published before the shutdown
	}{
		{name: "FirstClaim", at: 1},
		{name: "FirstClaimPipelinedStore", at: 1, pipelined: true},
		{name: "ClaimAfterSettle", at: 2, published: batch},
		{name: "SettleAndClaim", at: 2, pipelined: true, published: batch},
		{name: "DrainFirstClaim", at: 1, drain: true},
		{name: "DrainClaimAfterSettle", at: 2, drain: true, published: batch},
		{name: "DrainSettleAndClaim", at: 2, pipelined: true, drain: true, published: batch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := coretest.NewFakeClock(start)
			mem := memory.NewStore(&memory.StoreConfig{Clock: clock})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			is := &interruptingStore{Store: mem, shutdown: cancel, at: tc.at}
			var store core.Store = is
			if tc.pipelined {
				store = pipelinedInterruptingStore{is, mem}
			}
			pub := memory.NewPublisher()
			relay, err := core.NewRelay(store, pub, &core.RelayConfig{Clock: clock, BatchSize: batch, Concurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			events := make([]core.Event, 3*batch)
			for i := range events {
				if events[i], err = core.NewEvent("order.placed", map[string]int{"n": i}); err != nil {
					t.Fatal(err)
				}
			}
			if err := mem.Add(context.Background(), events...); err != nil {
				t.Fatal(err)
			}

			if tc.drain {
				_, err = relay.Drain(ctx)
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("Drain cancelled during a claim = %v, want nil or context.Canceled", err)
				}
			} else if err := relay.Run(ctx); err != nil {
				t.Fatalf("Run = %v after a graceful shutdown", err)
			}

			if got := pub.Count(); got != tc.published {
				t.Fatalf("%d events published, want %d (those claimed before the shutdown)", got, tc.published)
			}
			for i, e := range events {
				st, _ := mem.Get(e.ID)
				if i < tc.published {
					if st.PublishedAt.IsZero() {
						t.Errorf("event %d: claimed before the shutdown but not settled as published: %+v", i, st)
					}
					continue
				}
				if !st.LeaseUntil.IsZero() || st.Event.Attempts != 0 || !st.PublishedAt.IsZero() || !st.DeadAt.IsZero() {
					t.Errorf("event %d: not handed back untouched after a shutdown during its claim: leased until %v, attempts %d, published %v, dead %v",
						i, st.LeaseUntil, st.Event.Attempts, !st.PublishedAt.IsZero(), !st.DeadAt.IsZero())
				}
			}
			stats, err := mem.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if stats.Leased != 0 {
				t.Fatalf("%d events still leased after the relay stopped; they would wait out the whole lease", stats.Leased)
			}
		})
	}
}
