package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
)

// TestHandlerPublisherPerEventOutcomes: one failing event of a batch fails
// alone, a permanent one is dead-lettered, a panic is a transient error, and
// events after a cancelled context are given back unattempted.
func TestHandlerPublisherPerEventOutcomes(t *testing.T) {
	t.Parallel()
	evs := make([]core.Event, 5)
	for i := range evs {
		e, err := core.NewEvent("t", map[string]int{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = e
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen []core.ID
	h := core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		seen = append(seen, e.ID)
		switch e.ID {
		case evs[1].ID:
			return errors.New("transient")
		case evs[2].ID:
			return core.Permanent(errors.New("bad event"))
		case evs[3].ID:
			cancel() // the relay's PublishTimeout, say
			panic("boom")
		}
		return nil
	})
	err := core.HandlerPublisher(h).Publish(ctx, evs)
	errs := core.EventErrors(len(evs), err)
	if errs[0] != nil {
		t.Errorf("event 0: %v, want published", errs[0])
	}
	if errs[1] == nil || core.IsPermanent(errs[1]) || core.IsNotAttempted(errs[1]) {
		t.Errorf("event 1: %v, want a transient error", errs[1])
	}
	if !core.IsPermanent(errs[2]) {
		t.Errorf("event 2: %v, want permanent", errs[2])
	}
	var pe *core.PanicError
	if !errors.As(errs[3], &pe) || core.IsPermanent(errs[3]) {
		t.Errorf("event 3: %v, want a transient *core.PanicError", errs[3])
	}
	if !core.IsNotAttempted(errs[4]) || !errors.Is(errs[4], context.Canceled) {
		t.Errorf("event 4: %v, want NotAttempted(context.Canceled)", errs[4])
	}
	if len(seen) != 4 || seen[0] != evs[0].ID || seen[3] != evs[3].ID {
		t.Errorf("handler saw %v, want the first four events in order", seen)
	}
	if core.HandlerPublisher(h).Publish(context.Background(), evs[:1]) != nil {
		t.Error("a batch whose events all succeed must return nil")
	}
}

// TestHandlerPublisherUnderARelay: the relay settles each event by its own
// outcome: the healthy ones are published, the permanent failure is
// dead-lettered, the transient one stays pending for a retry.
func TestHandlerPublisherUnderARelay(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(nil)
	var evs []core.Event
	for _, typ := range []string{"ok", "retry", "poison", "ok"} {
		e, err := core.NewEvent(typ, map[string]string{})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if err := store.Add(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
	applied := map[core.ID]int{}
	h := core.HandlerFunc(func(_ context.Context, e core.Event) error {
		switch e.Type {
		case "retry":
			return errors.New("not yet")
		case "poison":
			return core.Permanent(errors.New("cannot apply"))
		}
		applied[e.ID]++
		return nil
	})
	r, err := core.NewRelay(store, core.HandlerPublisher(h), &core.RelayConfig{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		st, _ := store.Get(e.ID)
		switch e.Type {
		case "ok":
			if st.PublishedAt.IsZero() || applied[e.ID] != 1 {
				t.Errorf("healthy event: published %v, applied %d times", st.PublishedAt, applied[e.ID])
			}
		case "retry":
			if !st.PublishedAt.IsZero() || !st.DeadAt.IsZero() || st.LastError == "" {
				t.Errorf("transient failure: %+v, want pending with its error", st)
			}
		case "poison":
			if st.DeadAt.IsZero() {
				t.Errorf("permanent failure not dead-lettered: %+v", st)
			}
		}
	}
}
