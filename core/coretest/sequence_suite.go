package coretest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/outboxkit/outboxkit/core"
)

// SequencedDeduperFactory returns a new, empty sequenced deduper with its
// default configuration (waiting for sequence 1 on an unknown aggregate).
type SequencedDeduperFactory func(t *testing.T) core.SequencedDeduper

// TestSequencedDeduper runs the conformance suite for core.SequencedDeduper:
// order per (consumer, aggregate), stale and repeated events acknowledged
// without effect, gaps refused with ErrSequenceGap and a RetryAfter hint,
// and ApplyOnce routing sequenced events through OnceInOrder. Run
// TestDeduper as well: a sequenced deduper is a Deduper for unsequenced
// events.
func TestSequencedDeduper(t *testing.T, newDeduper SequencedDeduperFactory) {
	t.Helper()
	ctx := context.Background()
	ev := func(aggregate string, seq int64) core.Event {
		e := newEvent("order.updated", t0)
		e.AggregateType, e.AggregateID, e.Sequence = "order", aggregate, seq
		return e
	}

	t.Run("InOrderStaleAndGap", func(t *testing.T) {
		d := newDeduper(t)
		var ran []int64
		deliver := func(e core.Event) (bool, error) {
			return d.OnceInOrder(ctx, "billing", e, func(context.Context) error { ran = append(ran, e.Sequence); return nil })
		}
		e1, e2, e3 := ev("A", 1), ev("A", 2), ev("A", 3)
		for _, step := range []struct {
			e       core.Event
			applied bool
			gap     bool
		}{
			{e1, true, false}, {e1, false, false}, {e3, false, true}, {e2, true, false},
			{e1, false, false}, {e3, true, false}, {e2, false, false},
		} {
			applied, err := deliver(step.e)
			if step.gap {
				var g *core.SequenceGapError
				if applied || !errors.Is(err, core.ErrSequenceGap) || !errors.As(err, &g) || g.Expected != 2 || g.Got != 3 {
					t.Fatalf("sequence %d = %v, %v; want a gap waiting for 2", step.e.Sequence, applied, err)
				}
				if after, ok := core.RetryAfterHint(err); !ok || after <= 0 || core.IsPermanent(err) {
					t.Fatalf("a fresh gap's error %v has hint %v, %v; want transient with a positive RetryAfter", err, after, ok)
				}
				continue
			}
			if err != nil || applied != step.applied {
				t.Fatalf("sequence %d = %v, %v; want %v, nil", step.e.Sequence, applied, err, step.applied)
			}
		}
		if !slices.Equal(ran, []int64{1, 2, 3}) {
			t.Fatalf("effects ran for %v, want [1 2 3]", ran)
		}
	})

	t.Run("UnknownAggregateWaitsForOne", func(t *testing.T) {
		d := newDeduper(t)
		_, err := d.OnceInOrder(ctx, "billing", ev("A", 2), func(context.Context) error { return nil })
		if !errors.Is(err, core.ErrSequenceGap) {
			t.Fatalf("first delivery with sequence 2 = %v; want a gap", err)
		}
	})

	t.Run("FailedEffectKeepsItsPlace", func(t *testing.T) {
		d := newDeduper(t)
		boom := errors.New("boom")
		e := ev("A", 1)
		if applied, err := d.OnceInOrder(ctx, "billing", e, func(context.Context) error { return boom }); applied || !errors.Is(err, boom) {
			t.Fatalf("failing effect = %v, %v; want false, boom", applied, err)
		}
		if applied, err := d.OnceInOrder(ctx, "billing", e, func(context.Context) error { return nil }); !applied || err != nil {
			t.Fatalf("after a failure = %v, %v; want applied", applied, err)
		}
	})

	t.Run("ConsumersAndAggregatesAreIndependent", func(t *testing.T) {
		d := newDeduper(t)
		for _, c := range []struct{ consumer, aggregate string }{{"billing", "A"}, {"shipping", "A"}, {"billing", "B"}} {
			if applied, err := d.OnceInOrder(ctx, c.consumer, ev(c.aggregate, 1), func(context.Context) error { return nil }); !applied || err != nil {
				t.Fatalf("%s/%s sequence 1 = %v, %v; want applied", c.consumer, c.aggregate, applied, err)
			}
		}
	})

	t.Run("ApplyOnceRoutesSequencedEvents", func(t *testing.T) {
		d := newDeduper(t)
		var ran int
		h := core.HandlerFunc(func(context.Context, core.Event) error { ran++; return nil })
		if _, err := core.ApplyOnce(ctx, d, "billing", h, ev("A", 2)); !errors.Is(err, core.ErrSequenceGap) {
			t.Fatalf("ApplyOnce of an early event = %v; want a gap (OnceInOrder, not Once)", err)
		}
		// A new event ID with an applied sequence is stale, not new.
		for i := 0; i < 2; i++ {
			if _, err := core.ApplyOnce(ctx, d, "billing", h, ev("A", 1)); err != nil {
				t.Fatal(err)
			}
		}
		if ran != 1 {
			t.Fatalf("handler ran %d times for two events with sequence 1, want 1", ran)
		}
		plain := newEvent("order.noted", t0)
		for i := 0; i < 2; i++ {
			if _, err := core.ApplyOnce(ctx, d, "billing", h, plain); err != nil {
				t.Fatal(err)
			}
		}
		if ran != 2 {
			t.Fatalf("an unsequenced event ran %d times for two deliveries, want once", ran-1)
		}
	})

	t.Run("ConcurrentDeliveriesApplyInOrder", func(t *testing.T) {
		d := newDeduper(t)
		const n = 20
		evs := make([]core.Event, n)
		for i := range evs {
			evs[i] = ev("A", int64(i+1))
		}
		var (
			mu  sync.Mutex
			ran []int64
			wg  sync.WaitGroup
		)
		errs := make(chan error, 4)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Every worker delivers every event, retrying gaps, so each
				// event arrives four times and out of step.
				for i := 0; i < n; {
					e := evs[(i+w*5)%n]
					_, err := d.OnceInOrder(ctx, "billing", e, func(context.Context) error {
						mu.Lock()
						ran = append(ran, e.Sequence)
						mu.Unlock()
						return nil
					})
					switch {
					case err == nil:
						i++
					case errors.Is(err, core.ErrSequenceGap):
					default:
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		want := make([]int64, n)
		for i := range want {
			want[i] = int64(i + 1)
		}
		if !slices.Equal(ran, want) {
			t.Fatalf("effects ran for %v, want 1..%d once each in order", ran, n)
		}
	})
}
