package coretest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outboxkit/core"
)

// TestDeduper runs the Deduper conformance suite.
func TestDeduper(t *testing.T, newDeduper DeduperFactory) {
	t.Helper()
	ctx := context.Background()

	t.Run("AppliesOnce", func(t *testing.T) {
		d := newDeduper(t)
		key := core.DedupeKey{Consumer: "billing", EventID: core.NewID()}
		var runs int
		effect := func(context.Context) error { runs++; return nil }
		applied, err := d.Once(ctx, key, effect)
		if err != nil || !applied {
			t.Fatalf("first Once = %v, %v; want true, nil", applied, err)
		}
		applied, err = d.Once(ctx, key, effect)
		if err != nil || applied {
			t.Fatalf("second Once = %v, %v; want false, nil", applied, err)
		}
		if runs != 1 {
			t.Fatalf("effect ran %d times, want 1", runs)
		}
	})

	t.Run("FailedEffectIsNotRecorded", func(t *testing.T) {
		d := newDeduper(t)
		key := core.DedupeKey{Consumer: "billing", EventID: core.NewID()}
		boom := errors.New("boom")
		applied, err := d.Once(ctx, key, func(context.Context) error { return boom })
		if !errors.Is(err, boom) || applied {
			t.Fatalf("Once with failing effect = %v, %v; want false, boom", applied, err)
		}
		applied, err = d.Once(ctx, key, func(context.Context) error { return nil })
		if err != nil || !applied {
			t.Fatalf("Once after a failure = %v, %v; want true, nil (the failure must not be recorded)", applied, err)
		}
	})

	t.Run("ConsumersAreIndependent", func(t *testing.T) {
		d := newDeduper(t)
		id := core.NewID()
		for _, c := range []string{"billing", "shipping"} {
			applied, err := d.Once(ctx, core.DedupeKey{Consumer: c, EventID: id}, func(context.Context) error { return nil })
			if err != nil || !applied {
				t.Fatalf("consumer %s: Once = %v, %v; want true, nil", c, applied, err)
			}
		}
	})

	t.Run("ConcurrentDeliveriesApplyOnce", func(t *testing.T) {
		d := newDeduper(t)
		key := core.DedupeKey{Consumer: "billing", EventID: core.NewID()}
		var runs, applied atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := d.Once(ctx, key, func(context.Context) error { runs.Add(1); return nil })
				if err != nil {
					errs <- err
					return
				}
				if ok {
					applied.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent Once: %v", err)
		}
		if runs.Load() != 1 || applied.Load() != 1 {
			t.Fatalf("8 concurrent deliveries: effect ran %d times and %d reported applied; want 1 and 1", runs.Load(), applied.Load())
		}
	})

	t.Run("ApplyOnceWithHandler", func(t *testing.T) {
		d := newDeduper(t)
		e, err := core.NewEvent("order.confirmed", map[string]int{"order": 7})
		if err != nil {
			t.Fatal(err)
		}
		var runs int
		h := core.ChainHandler(core.HandlerFunc(func(context.Context, core.Event) error { runs++; return nil }), core.Idempotent(d, "billing"))
		for i := 0; i < 3; i++ {
			if err := h.Handle(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		if runs != 1 {
			t.Fatalf("handler ran %d times for 3 deliveries, want 1", runs)
		}
	})
}
