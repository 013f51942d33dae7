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

const lease = 30 * time.Second

// TestStore runs the Store conformance suite.
func TestStore(t *testing.T, newStore StoreFactory, features StoreFeatures) {
	t.Helper()
	ctx := context.Background()
	plain := func(t *testing.T) (core.Store, WriteFunc) { return newStore(t, StoreOptions{}) }

	claim := func(t *testing.T, s core.Store, limit int, now time.Time) core.Batch {
		t.Helper()
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: limit, LeaseFor: lease, Now: now})
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		return b
	}
	settle := func(t *testing.T, s core.Store, b core.Batch, now time.Time, kind core.OutcomeKind, delay time.Duration) error {
		t.Helper()
		out := make([]core.Outcome, len(b.Events))
		for i, e := range b.Events {
			out[i] = core.Outcome{ID: e.ID, Kind: kind, Delay: delay}
			if kind == core.Retry || kind == core.DeadLettered {
				out[i].Error = "boom"
			}
		}
		return s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out, Now: now})
	}
	write := func(t *testing.T, w WriteFunc, events ...core.Event) {
		t.Helper()
		if err := w(ctx, events...); err != nil {
			t.Fatalf("write: %v", err)
		}
	}

	t.Run("ClaimOldestFirstOnce", func(t *testing.T) {
		s, w := plain(t)
		e1, e2, e3 := newEvent("a", t0), newEvent("b", t0.Add(time.Second)), newEvent("c", t0.Add(2*time.Second))
		write(t, w, e3, e1, e2)
		now := t0.Add(time.Minute)
		b := claim(t, s, 2, now)
		assertIDs(t, "first claim", b.Events, e1.ID, e2.ID)
		if b.Lease.Token.IsZero() {
			t.Fatal("lease token is the nil UUID")
		}
		for _, e := range b.Events {
			if e.Attempts != 1 {
				t.Fatalf("event %s: Attempts = %d after first claim, want 1", e.ID, e.Attempts)
			}
		}
		if got := b.Events[0]; got.Type != "a" || !equalJSON(got.Payload, e1.Payload) || got.Headers["traceparent"] != e1.Headers["traceparent"] ||
			got.SchemaVersion != 1 || !got.CreatedAt.Equal(e1.CreatedAt) {
			t.Fatalf("claimed event lost fields: %+v, want %+v", got, e1)
		}
		b2 := claim(t, s, 10, now)
		assertIDs(t, "second claim", b2.Events, e3.ID)
		if b2.Lease.Token == b.Lease.Token {
			t.Fatal("two claims share a lease token")
		}
		assertIDs(t, "third claim", claim(t, s, 10, now).Events)
	})

	t.Run("ExpiredLeaseIsClaimableAgain", func(t *testing.T) {
		s, w := plain(t)
		e := newEvent("a", t0)
		write(t, w, e)
		b := claim(t, s, 10, t0)
		assertIDs(t, "claim", b.Events, e.ID)
		assertIDs(t, "claim under live lease", claim(t, s, 10, t0.Add(lease-time.Second)).Events)
		b2 := claim(t, s, 10, t0.Add(lease+time.Second))
		assertIDs(t, "claim after expiry", b2.Events, e.ID)
		if b2.Events[0].Attempts != 2 {
			t.Fatalf("Attempts = %d on second claim, want 2", b2.Events[0].Attempts)
		}
	})

	t.Run("StaleLeaseTokenIsRefused", func(t *testing.T) {
		s, w := plain(t)
		e := newEvent("a", t0)
		write(t, w, e)
		stale := claim(t, s, 10, t0)
		later := t0.Add(lease + time.Second)
		fresh := claim(t, s, 10, later)
		assertIDs(t, "reclaim", fresh.Events, e.ID)

		err := settle(t, s, stale, later, core.Published, 0)
		var lost *core.LeaseLostError
		if !errors.Is(err, core.ErrLeaseLost) || !errors.As(err, &lost) || len(lost.IDs) != 1 || lost.IDs[0] != e.ID {
			t.Fatalf("settle with stale token: err = %v, want a LeaseLostError for %s", err, e.ID)
		}
		// The stale settle must not have published it: the fresh lease still
		// owns it, and settling with it works.
		if err := settle(t, s, fresh, later, core.Published, 0); err != nil {
			t.Fatalf("settle with current token: %v", err)
		}
		assertIDs(t, "claim after publish", claim(t, s, 10, later.Add(2*lease)).Events)
		// A settle after the event is published is refused too.
		if err := settle(t, s, fresh, later, core.Published, 0); !errors.Is(err, core.ErrLeaseLost) {
			t.Fatalf("second settle: err = %v, want ErrLeaseLost", err)
		}
	})

	t.Run("SettleOutcomes", func(t *testing.T) {
		s, w := plain(t)
		pub, retry, dead, rel := newEvent("pub", t0), newEvent("retry", t0), newEvent("dead", t0), newEvent("rel", t0)
		write(t, w, pub, retry, dead, rel)
		b := claim(t, s, 10, t0)
		if len(b.Events) != 4 {
			t.Fatalf("claimed %d events, want 4", len(b.Events))
		}
		err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Now: t0, Outcomes: []core.Outcome{
			{ID: pub.ID, Kind: core.Published},
			{ID: retry.ID, Kind: core.Retry, Error: "try later", Delay: 10 * time.Second},
			{ID: dead.ID, Kind: core.DeadLettered, Error: "poison"},
			{ID: rel.ID, Kind: core.Released},
		}})
		if err != nil {
			t.Fatalf("Settle: %v", err)
		}
		// Released comes back at once with its attempt given back.
		b2 := claim(t, s, 10, t0)
		assertIDs(t, "claim right after settle", b2.Events, rel.ID)
		if b2.Events[0].Attempts != 1 {
			t.Fatalf("released event: Attempts = %d on reclaim, want 1 (release restores the count)", b2.Events[0].Attempts)
		}
		if err := settle(t, s, b2, t0, core.Published, 0); err != nil {
			t.Fatal(err)
		}
		assertIDs(t, "claim before retry delay", claim(t, s, 10, t0.Add(9*time.Second)).Events)
		b3 := claim(t, s, 10, t0.Add(11*time.Second))
		assertIDs(t, "claim after retry delay", b3.Events, retry.ID)
		if b3.Events[0].Attempts != 2 {
			t.Fatalf("retried event: Attempts = %d, want 2", b3.Events[0].Attempts)
		}
		if err := settle(t, s, b3, t0.Add(11*time.Second), core.Published, 0); err != nil {
			t.Fatal(err)
		}
		// Published and dead-lettered events never come back.
		assertIDs(t, "claim much later", claim(t, s, 10, t0.Add(24*time.Hour)).Events)
	})

	// A relay may settle a batch in pieces, out of claim order and with
	// mixed outcomes (a store's fast paths for all-published batches and
	// for events settled in claim order must not leak onto the events left
	// out): each settlement touches exactly its events, and the rest stay
	// leased until they are settled in turn.
	t.Run("SettleMixedAndPartly", func(t *testing.T) {
		s, w := plain(t)
		ev := make([]core.Event, 8)
		for i := range ev {
			ev[i] = newEvent(fmt.Sprintf("part.%d", i), t0.Add(time.Duration(i)*time.Millisecond))
		}
		write(t, w, ev...)
		now := t0.Add(time.Minute)
		b := claim(t, s, len(ev), now)
		assertIDs(t, "claim", b.Events, ids(ev...)...)
		part := func(what string, outcomes ...core.Outcome) {
			t.Helper()
			if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Now: now, Outcomes: outcomes}); err != nil {
				t.Fatalf("settle %s: %v", what, err)
			}
		}
		part("two published, reversed", core.Outcome{ID: ev[4].ID, Kind: core.Published}, core.Outcome{ID: ev[2].ID, Kind: core.Published})
		assertIDs(t, "claim after a partial publish", claim(t, s, 10, now).Events)
		part("four mixed, out of order",
			core.Outcome{ID: ev[6].ID, Kind: core.Retry, Error: "later", Delay: 10 * time.Second},
			core.Outcome{ID: ev[1].ID, Kind: core.Published},
			core.Outcome{ID: ev[3].ID, Kind: core.DeadLettered, Error: "poison"},
			core.Outcome{ID: ev[0].ID, Kind: core.Released})
		again := claim(t, s, 10, now)
		assertIDs(t, "claim after the mixed part: only the released event", again.Events, ev[0].ID)
		if again.Events[0].Attempts != 1 {
			t.Fatalf("released event: Attempts = %d on reclaim, want 1", again.Events[0].Attempts)
		}
		if err := settle(t, s, again, now, core.Published, 0); err != nil {
			t.Fatal(err)
		}
		last := core.SettleRequest{Lease: b.Lease, Now: now, Outcomes: []core.Outcome{
			{ID: ev[7].ID, Kind: core.Published},
			{ID: ev[5].ID, Kind: core.Retry, Error: "much later", Delay: 20 * time.Second},
		}}
		if sc, ok := s.(core.SettleClaimer); ok {
			next, settleErr, claimErr := sc.SettleAndClaim(ctx, last, core.ClaimRequest{Limit: 10, LeaseFor: lease, Now: now})
			if settleErr != nil || claimErr != nil {
				t.Fatalf("settle the last two with the next claim: settle %v, claim %v", settleErr, claimErr)
			}
			assertIDs(t, "claim beside the last part", next.Events)
		} else if err := s.Settle(ctx, last); err != nil {
			t.Fatalf("settle the last two: %v", err)
		}
		// Settled events are no longer the old lease's.
		err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Now: now, Outcomes: []core.Outcome{
			{ID: ev[2].ID, Kind: core.Retry, Error: "again?"}, {ID: ev[1].ID, Kind: core.Published},
		}})
		var lost *core.LeaseLostError
		if !errors.As(err, &lost) || len(lost.IDs) != 2 || lost.IDs[0] != ev[2].ID || lost.IDs[1] != ev[1].ID {
			t.Fatalf("settling settled events again: %v, want a LeaseLostError naming both in order", err)
		}
		retried := claim(t, s, 10, now.Add(11*time.Second))
		assertIDs(t, "claim after the first retry delay", retried.Events, ev[6].ID)
		if retried.Events[0].Attempts != 2 {
			t.Fatalf("retried event: Attempts = %d, want 2", retried.Events[0].Attempts)
		}
		assertIDs(t, "claim after the second retry delay", claim(t, s, 10, now.Add(21*time.Second)).Events, ev[5].ID)
		// Published and dead-lettered events never come back; the two
		// retried ones are leased.
		assertIDs(t, "claim much later", claim(t, s, 10, now.Add(25*time.Second)).Events)
		if features.Stats {
			st, err := s.(core.StatsReader).Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Pending != 2 || st.DeadLettered != 1 {
				t.Fatalf("stats: %+v, want 2 pending (the retried events) and 1 dead-lettered", st)
			}
		}
	})

	t.Run("DeferredWaitsAndKeepsAttempts", func(t *testing.T) {
		s, w := plain(t)
		e, other := newEvent("deferred", t0), newEvent("other", t0)
		write(t, w, e, other)
		b := claim(t, s, 10, t0)
		err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Now: t0, Outcomes: []core.Outcome{
			{ID: e.ID, Kind: core.Deferred, Error: "misconfigured", Delay: 10 * time.Second},
			{ID: other.ID, Kind: core.Published},
		}})
		if err != nil {
			t.Fatalf("Settle: %v", err)
		}
		assertIDs(t, "claim before the deferral ends", claim(t, s, 10, t0.Add(9*time.Second)).Events)
		again := claim(t, s, 10, t0.Add(11*time.Second))
		assertIDs(t, "claim after the deferral", again.Events, e.ID)
		if again.Events[0].Attempts != 1 {
			t.Fatalf("deferred event: Attempts = %d on reclaim, want 1 (a deferral gives its attempt back)", again.Events[0].Attempts)
		}
	})

	t.Run("FutureAvailableAtWaits", func(t *testing.T) {
		s, w := plain(t)
		e := newEvent("later", t0)
		e.AvailableAt = t0.Add(time.Hour)
		write(t, w, e)
		assertIDs(t, "claim before AvailableAt", claim(t, s, 10, t0.Add(time.Minute)).Events)
		assertIDs(t, "claim after AvailableAt", claim(t, s, 10, t0.Add(time.Hour+time.Second)).Events, e.ID)
	})

	t.Run("InvalidEventsWriteNothing", func(t *testing.T) {
		s, w := plain(t)
		good := newEvent("good", t0)
		noType := newEvent("", t0)
		badJSON := newEvent("bad", t0)
		badJSON.Payload = []byte(`{"unterminated"`)
		for name, bad := range map[string]core.Event{"empty type": noType, "non-JSON payload": badJSON, "nil ID": {Type: "x", Payload: []byte(`{}`)}} {
			err := w(ctx, good, bad)
			if !errors.Is(err, core.ErrInvalidEvent) {
				t.Fatalf("%s: write error = %v, want ErrInvalidEvent", name, err)
			}
		}
		assertIDs(t, "claim after refused writes", claim(t, s, 10, t0.Add(time.Hour)).Events)
	})

	t.Run("ConcurrentClaimersNeverShareALiveLease", func(t *testing.T) {
		s, w := plain(t)
		const n = 300
		events := make([]core.Event, n)
		for i := range events {
			events[i] = newEvent("c", t0.Add(time.Duration(i)*time.Millisecond))
		}
		write(t, w, events...)
		var mu sync.Mutex
		seen := make(map[core.ID]int)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					b, err := s.Claim(ctx, core.ClaimRequest{Limit: 7, LeaseFor: lease, Now: t0.Add(time.Minute)})
					if err != nil {
						errs <- err
						return
					}
					if len(b.Events) == 0 {
						return
					}
					mu.Lock()
					for _, e := range b.Events {
						seen[e.ID]++
					}
					mu.Unlock()
					out := make([]core.Outcome, len(b.Events))
					for i, e := range b.Events {
						out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
					}
					if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out, Now: t0.Add(time.Minute)}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent claimer: %v", err)
		}
		if len(seen) != n {
			t.Fatalf("claimed %d distinct events, want %d", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Fatalf("event %s claimed %d times under live leases", id, c)
			}
		}
	})

	t.Run("BackoffThenDeadLetter", func(t *testing.T) {
		s, w := plain(t)
		clock := NewFakeClock(t0)
		poison, healthy := newEvent("poison", t0), newEvent("healthy", t0)
		write(t, w, poison, healthy)
		var mu sync.Mutex
		attempts := map[core.ID]int{}
		pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
			mu.Lock()
			defer mu.Unlock()
			be := core.NewBatchError(len(events))
			for i, e := range events {
				attempts[e.ID]++
				if e.ID == poison.ID {
					be.Set(i, errors.New("consumer rejects it"))
				}
			}
			return be.ErrOrNil()
		})
		relay, err := core.NewRelay(s, pub, &core.RelayConfig{
			Clock: clock, BatchSize: 10,
			Retry: core.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Minute, DisableJitter: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		drain := func(wantAttempts int) {
			t.Helper()
			if _, err := relay.Drain(ctx); err != nil {
				t.Fatalf("Drain at %s: %v", clock.Now().Sub(t0), err)
			}
			mu.Lock()
			defer mu.Unlock()
			if attempts[poison.ID] != wantAttempts {
				t.Fatalf("at +%s: poison tried %d times, want %d", clock.Now().Sub(t0), attempts[poison.ID], wantAttempts)
			}
		}
		drain(1) // t0: fails, retry in 1s
		clock.Advance(999 * time.Millisecond)
		drain(1)
		clock.Advance(2 * time.Millisecond)
		drain(2) // fails, retry in 2s
		clock.Advance(1990 * time.Millisecond)
		drain(2)
		clock.Advance(20 * time.Millisecond)
		drain(3) // third failure reaches MaxAttempts: dead-lettered
		clock.Advance(24 * time.Hour)
		drain(3)
		mu.Lock()
		if attempts[healthy.ID] != 1 {
			t.Fatalf("healthy event published %d times, want 1", attempts[healthy.ID])
		}
		mu.Unlock()
		if features.Stats {
			st, err := s.(core.StatsReader).Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.DeadLettered != 1 || st.Pending != 0 {
				t.Fatalf("stats after dead-letter: %+v, want 1 dead-lettered, 0 pending", st)
			}
		}
	})

	t.Run("PermanentErrorDeadLettersAtOnce", func(t *testing.T) {
		s, w := plain(t)
		e := newEvent("poison", t0)
		write(t, w, e)
		calls := 0
		pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
			calls++
			return core.Permanent(errors.New("schema rejected"))
		})
		relay, err := core.NewRelay(s, pub, &core.RelayConfig{Clock: NewFakeClock(t0.Add(time.Second))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := relay.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		assertIDs(t, "claim after permanent failure", claim(t, s, 10, t0.Add(48*time.Hour)).Events)
		if calls != 1 {
			t.Fatalf("publisher called %d times, want 1", calls)
		}
	})

	if _, ok := newStoreProbe(newStore, t).(core.SettleClaimer); ok {
		t.Run("SettleAndClaim", func(t *testing.T) {
			s, w := plain(t)
			sc := s.(core.SettleClaimer)
			events := []core.Event{newEvent("a", t0), newEvent("b", t0.Add(time.Second)), newEvent("c", t0.Add(2*time.Second))}
			write(t, w, events...)
			now := t0.Add(time.Minute)
			first := claim(t, s, 1, now)
			assertIDs(t, "first claim", first.Events, events[0].ID)
			next, settleErr, claimErr := sc.SettleAndClaim(ctx,
				core.SettleRequest{Lease: first.Lease, Now: now, Outcomes: []core.Outcome{{ID: events[0].ID, Kind: core.Published}}},
				core.ClaimRequest{Limit: 1, LeaseFor: lease, Now: now})
			if settleErr != nil || claimErr != nil {
				t.Fatalf("SettleAndClaim: settle %v, claim %v", settleErr, claimErr)
			}
			assertIDs(t, "claimed with the settle", next.Events, events[1].ID)
			if next.Lease.Token == first.Lease.Token {
				t.Fatal("the pipelined claim reused the settled lease's token")
			}
			// A stale settle is refused while the claim still goes ahead.
			later := now.Add(lease + time.Second)
			fresh := claim(t, s, 1, later) // takes events[1] over
			assertIDs(t, "reclaim after expiry", fresh.Events, events[1].ID)
			next2, settleErr, claimErr := sc.SettleAndClaim(ctx,
				core.SettleRequest{Lease: next.Lease, Now: later, Outcomes: []core.Outcome{{ID: events[1].ID, Kind: core.Published}}},
				core.ClaimRequest{Limit: 10, LeaseFor: lease, Now: later})
			if !errors.Is(settleErr, core.ErrLeaseLost) || claimErr != nil {
				t.Fatalf("stale SettleAndClaim: settle %v (want ErrLeaseLost), claim %v", settleErr, claimErr)
			}
			assertIDs(t, "claim beside a stale settle", next2.Events, events[2].ID)
			if err := settle(t, s, fresh, later, core.Published, 0); err != nil {
				t.Fatalf("the stale settle disturbed the current lease: %v", err)
			}
		})
	}
	if features.DestinationFilter {
		t.Run("DestinationFilter", func(t *testing.T) {
			s, w := plain(t)
			a, b, none := newEvent("a", t0), newEvent("b", t0), newEvent("none", t0)
			a.Destination, b.Destination = "topic-a", "topic-b"
			write(t, w, a, b, none)
			got, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: lease, Now: t0.Add(time.Minute), Destination: "topic-b"})
			if err != nil {
				t.Fatal(err)
			}
			assertIDs(t, "claim for topic-b", got.Events, b.ID)
			assertIDSet(t, "claim for all destinations", claim(t, s, 10, t0.Add(time.Minute)).Events, a.ID, none.ID)
		})
	}
	if features.Ordering {
		t.Run("Ordering", func(t *testing.T) { testOrdering(t, newStore, claim, settle, write) })
	}
	if features.Notifier {
		t.Run("Notifier", func(t *testing.T) {
			s, w := plain(t)
			n, ok := s.(core.Notifier)
			if !ok {
				t.Fatal("StoreFeatures.Notifier is set but the store does not implement core.Notifier")
			}
			lctx, cancel := context.WithCancel(ctx)
			woken := make(chan struct{}, 1)
			done := make(chan error, 1)
			go func() {
				done <- n.Listen(lctx, func() {
					select {
					case woken <- struct{}{}:
					default:
					}
				})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Listen returned %v, want context.Canceled", err)
				}
			}()
			waitWake := func(what string) {
				t.Helper()
				select {
				case <-woken:
				case <-time.After(10 * time.Second):
					t.Fatalf("no wake-up %s within 10s", what)
				}
			}
			waitWake("once listening")
			write(t, w, newEvent("wake", t0))
			waitWake("after a write")
		})
	}
	if features.Stats {
		t.Run("Stats", func(t *testing.T) {
			s, w := plain(t)
			sr, ok := s.(core.StatsReader)
			if !ok {
				t.Fatal("StoreFeatures.Stats is set but the store does not implement core.StatsReader")
			}
			st, err := sr.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Pending != 0 || st.DeadLettered != 0 || !st.OldestPendingAt.IsZero() {
				t.Fatalf("empty store stats: %+v", st)
			}
			events := []core.Event{newEvent("s", t0), newEvent("s", t0.Add(time.Second)), newEvent("s", t0.Add(2*time.Second)), newEvent("s", t0.Add(3*time.Second))}
			write(t, w, events...)
			b := claim(t, s, 2, t0.Add(time.Minute)) // the two oldest
			if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Now: t0.Add(time.Minute), Outcomes: []core.Outcome{
				{ID: events[0].ID, Kind: core.DeadLettered, Error: "x"},
				{ID: events[1].ID, Kind: core.Retry, Error: "y", Delay: time.Hour},
			}}); err != nil {
				t.Fatal(err)
			}
			claim(t, s, 1, t0.Add(time.Minute)) // events[2] leased
			st, err = sr.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Pending != 3 || st.DeadLettered != 1 || st.Leased != 1 {
				t.Fatalf("stats: %+v, want 3 pending, 1 leased, 1 dead-lettered", st)
			}
			if !st.OldestPendingAt.Equal(events[1].CreatedAt) {
				t.Fatalf("OldestPendingAt = %s, want %s", st.OldestPendingAt, events[1].CreatedAt)
			}
			if st.Attempts[1] != 2 || st.Attempts[0] != 1 {
				t.Fatalf("Attempts distribution = %v, want {0:1, 1:2}", st.Attempts)
			}
		})
	}
	if features.Replay {
		t.Run("Replay", func(t *testing.T) {
			s, w := plain(t)
			r, ok := s.(core.Replayer)
			if !ok {
				t.Fatal("StoreFeatures.Replay is set but the store does not implement core.Replayer")
			}
			a, b, dead := newEvent("a", t0), newEvent("b", t0), newEvent("dead", t0)
			write(t, w, a, b, dead)
			batch := claim(t, s, 10, t0)
			out := []core.Outcome{{ID: a.ID, Kind: core.Published}, {ID: b.ID, Kind: core.Published}, {ID: dead.ID, Kind: core.DeadLettered, Error: "x"}}
			if err := s.Settle(ctx, core.SettleRequest{Lease: batch.Lease, Outcomes: out, Now: t0}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Replay(ctx, core.ReplayFilter{}); err == nil {
				t.Fatal("Replay with an empty filter succeeded; it must refuse")
			}
			n, err := r.Replay(ctx, core.ReplayFilter{IDs: []core.ID{a.ID}})
			if err != nil || n != 1 {
				t.Fatalf("Replay by ID = %d, %v; want 1, nil", n, err)
			}
			n, err = r.Replay(ctx, core.ReplayFilter{DeadOnly: true})
			if err != nil || n != 1 {
				t.Fatalf("Replay of dead letters = %d, %v; want 1, nil", n, err)
			}
			got := claim(t, s, 10, t0.Add(48*time.Hour))
			assertIDs(t, "claim after replay", got.Events, a.ID, dead.ID)
			for _, e := range got.Events {
				if e.Attempts != 1 {
					t.Fatalf("replayed event %s: Attempts = %d, want 1 (replay resets the count)", e.ID, e.Attempts)
				}
			}
		})
	}
	if features.Prune {
		t.Run("Prune", func(t *testing.T) {
			s, w := plain(t)
			p, ok := s.(core.Pruner)
			if !ok {
				t.Fatal("StoreFeatures.Prune is set but the store does not implement core.Pruner")
			}
			old, recent, dead, pending := newEvent("old", t0), newEvent("recent", t0), newEvent("dead", t0), newEvent("pending", t0)
			write(t, w, old, recent, dead)
			b := claim(t, s, 10, t0)
			if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Now: t0, Outcomes: []core.Outcome{
				{ID: old.ID, Kind: core.Published}, {ID: dead.ID, Kind: core.DeadLettered, Error: "x"},
				{ID: recent.ID, Kind: core.Retry, Delay: time.Minute},
			}}); err != nil {
				t.Fatal(err)
			}
			b = claim(t, s, 10, t0.Add(10*time.Minute))
			if err := settle(t, s, b, t0.Add(10*time.Minute), core.Published, 0); err != nil {
				t.Fatal(err)
			}
			write(t, w, pending)
			var progress int64
			n, err := p.Prune(ctx, core.PruneRequest{PublishedBefore: t0.Add(5 * time.Minute), BatchSize: 1, Progress: func(d int64) { progress = d }})
			if err != nil || n != 1 {
				t.Fatalf("Prune = %d, %v; want 1, nil", n, err)
			}
			if progress != 1 {
				t.Fatalf("Progress reported %d, want 1", progress)
			}
			if features.Replay {
				// The pruned event is gone; the recent one and the dead letter
				// are still there to replay.
				n, err := s.(core.Replayer).Replay(ctx, core.ReplayFilter{IDs: []core.ID{old.ID, recent.ID, dead.ID}})
				if err != nil || n != 2 {
					t.Fatalf("Replay after prune = %d, %v; want 2 (recent and dead remain)", n, err)
				}
			}
			if features.Stats {
				st, err := s.(core.StatsReader).Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if features.Replay && st.Pending != 3 || !features.Replay && (st.Pending != 1 || st.DeadLettered != 1) {
					t.Fatalf("stats after prune: %+v", st)
				}
			}
		})
	}
}

// newStoreProbe makes one store to learn which optional interfaces the
// factory's stores implement.
func newStoreProbe(newStore StoreFactory, t *testing.T) core.Store {
	s, _ := newStore(t, StoreOptions{})
	return s
}

func testOrdering(t *testing.T, newStore StoreFactory,
	claim func(*testing.T, core.Store, int, time.Time) core.Batch,
	settle func(*testing.T, core.Store, core.Batch, time.Time, core.OutcomeKind, time.Duration) error,
	write func(*testing.T, WriteFunc, ...core.Event),
) {
	ctx := context.Background()
	s, w := newStore(t, StoreOptions{Ordering: true})
	agg := func(id string, i int) core.Event {
		e := newEvent(fmt.Sprintf("%s.%d", id, i), t0.Add(time.Duration(i)*time.Second))
		e.AggregateType, e.AggregateID = "order", id
		return e
	}
	a1, a2, a3 := agg("A", 1), agg("A", 2), agg("A", 3)
	b1, b2 := agg("B", 1), agg("B", 2)
	free := newEvent("free", t0)
	write(t, w, a1, a2)
	write(t, w, b1, a3, b2, free)

	now := t0.Add(time.Minute)
	batch := claim(t, s, 10, now)
	assertIDSet(t, "first claim: only heads and unordered events", batch.Events, a1.ID, b1.ID, free.ID)
	for _, e := range batch.Events {
		if e.ID == a1.ID && e.Sequence != 1 || e.ID == b1.ID && e.Sequence != 1 {
			t.Fatalf("head %s has Sequence %d, want 1", e.Type, e.Sequence)
		}
	}
	assertIDs(t, "claim while heads are leased", claim(t, s, 10, now).Events)

	// A's head is published, B's head fails: A moves on, B waits.
	err := s.Settle(ctx, core.SettleRequest{Lease: batch.Lease, Now: now, Outcomes: []core.Outcome{
		{ID: a1.ID, Kind: core.Published}, {ID: free.ID, Kind: core.Published},
		{ID: b1.ID, Kind: core.Retry, Error: "down", Delay: time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	batch = claim(t, s, 10, now)
	assertIDs(t, "claim after A's head published and B's failed", batch.Events, a2.ID)
	if batch.Events[0].Sequence != 2 {
		t.Fatalf("A's second event has Sequence %d, want 2", batch.Events[0].Sequence)
	}
	if err := settle(t, s, batch, now, core.Published, 0); err != nil {
		t.Fatal(err)
	}
	batch = claim(t, s, 10, now)
	assertIDs(t, "A continues while B is blocked", batch.Events, a3.ID)
	if err := settle(t, s, batch, now, core.Published, 0); err != nil {
		t.Fatal(err)
	}
	batch = claim(t, s, 10, now.Add(2*time.Hour))
	assertIDs(t, "B's head after its retry delay", batch.Events, b1.ID)
	if err := settle(t, s, batch, now.Add(2*time.Hour), core.Published, 0); err != nil {
		t.Fatal(err)
	}
	assertIDs(t, "B's second event", claim(t, s, 10, now.Add(2*time.Hour)).Events, b2.ID)
}

func assertIDs(t *testing.T, what string, got []core.Event, want ...core.ID) {
	t.Helper()
	ids := make([]core.ID, len(got))
	for i, e := range got {
		ids[i] = e.ID
	}
	if len(ids) != len(want) {
		t.Fatalf("%s: got %d events %v, want %d %v", what, len(ids), ids, len(want), want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("%s: got %v, want %v (in this order)", what, ids, want)
		}
	}
}

func assertIDSet(t *testing.T, what string, got []core.Event, want ...core.ID) {
	t.Helper()
	set := make(map[core.ID]bool, len(got))
	for _, e := range got {
		set[e.ID] = true
	}
	ok := len(set) == len(want) && len(got) == len(want)
	for _, id := range want {
		ok = ok && set[id]
	}
	if !ok {
		t.Fatalf("%s: got %d events, want exactly %v", what, len(got), want)
	}
}

func ids(events ...core.Event) []core.ID {
	out := make([]core.ID, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}
