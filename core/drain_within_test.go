package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
)

func addEvents(t *testing.T, store *memory.Store, n int) []core.Event {
	t.Helper()
	var out []core.Event
	for i := range n {
		e, err := core.NewEvent("drain.test", map[string]int{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := store.Add(context.Background(), out...); err != nil {
		t.Fatal(err)
	}
	return out
}

func pendingCount(t *testing.T, store *memory.Store) (pending, leased int64) {
	t.Helper()
	st, err := store.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Pending, st.Leased
}

func TestDrainWithinDrainsAll(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(nil)
	pub := memory.NewPublisher()
	addEvents(t, store, 25)
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := relay.DrainWithin(context.Background(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := core.DrainReport{Batches: 3, Claimed: 25, Published: 25}
	if rep != want {
		t.Fatalf("report %+v, want %+v", rep, want)
	}
	if pub.Count() != 25 {
		t.Fatalf("published %d", pub.Count())
	}
}

// At claimUntil no batch is claimed any more; the batch in flight finishes.
func TestDrainWithinStopsClaimingAtItsDeadline(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(nil)
	addEvents(t, store, 30)
	var mu sync.Mutex
	calls := 0
	// Each publish takes 50ms: with claiming allowed for 70ms, two batches
	// start (at 0 and 50ms), the second finishes after the deadline, and no
	// third is claimed.
	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		mu.Lock()
		calls++
		mu.Unlock()
		select {
		case <-time.After(50 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := relay.DrainWithin(context.Background(), time.Now().Add(70*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Batches != 2 || rep.Published != 20 || !rep.More {
		t.Fatalf("report %+v, want 2 batches, 20 published, more", rep)
	}
	if pending, leased := pendingCount(t, store); pending != 10 || leased != 0 {
		t.Fatalf("pending %d (leased %d), want 10 free", pending, leased)
	}
}

// Cut off mid-publish (ctx ends), the batch in flight is released, not
// lost: the next run publishes it.
func TestDrainWithinCutOffLosesNothing(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(nil)
	all := addEvents(t, store, 15)
	block := make(chan struct{})
	seen := map[core.ID]int{}
	var mu sync.Mutex
	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		for _, e := range events {
			seen[e.ID]++
		}
		mu.Unlock()
		return nil
	})
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	rep, err := relay.DrainWithin(ctx, time.Now().Add(time.Minute))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cut-off drain: %v, want the deadline", err)
	}
	if rep.Released != 10 || rep.Published != 0 || !rep.More {
		t.Fatalf("report %+v, want 10 released", rep)
	}
	if pending, leased := pendingCount(t, store); pending != 15 || leased != 0 {
		t.Fatalf("after the cut: pending %d, leased %d; want 15, none leased", pending, leased)
	}
	close(block)
	rep, err = relay.DrainWithin(context.Background(), time.Now().Add(time.Minute))
	if err != nil || rep.Published != 15 {
		t.Fatalf("next run: %+v, %v", rep, err)
	}
	for _, e := range all {
		if seen[e.ID] != 1 {
			t.Errorf("event %s published %d times", e.ID, seen[e.ID])
		}
	}
}
