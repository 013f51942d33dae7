package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
)

func TestMuxRoutesAndRejectsUnknownTypes(t *testing.T) {
	mux := core.NewMux()
	var got []string
	mux.RegisterFunc("a", func(_ context.Context, e core.Event) error { got = append(got, "a:"+e.Type); return nil })
	mux.Use(func(next core.Handler) core.Handler {
		return core.HandlerFunc(func(ctx context.Context, e core.Event) error { got = append(got, "mw"); return next.Handle(ctx, e) })
	})
	ctx := context.Background()
	if err := mux.Handle(ctx, core.Event{Type: "a"}); err != nil {
		t.Fatal(err)
	}
	err := mux.Handle(ctx, core.Event{Type: "zzz"}) // no CreatedAt: cannot be aged
	if !errors.Is(err, core.ErrUnknownEventType) || !core.IsPermanent(err) {
		t.Fatalf("unknown type: err = %v, want a permanent ErrUnknownEventType", err)
	}
	if strings.Join(got, ",") != "mw,a:a" {
		t.Fatalf("calls = %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate registration did not panic")
		}
	}()
	mux.RegisterFunc("a", func(context.Context, core.Event) error { return nil })
}

// TestMuxRetriesUnknownTypesByDefault: in a rolling deploy the producer
// ships a new event type before every consumer has its handler, so a fresh
// event of an unknown type must be redelivered, not dead-lettered.
func TestMuxRetriesUnknownTypesByDefault(t *testing.T) {
	err := core.NewMux().Handle(context.Background(), core.Event{Type: "order.split", CreatedAt: time.Now().Add(-time.Minute)})
	if !errors.Is(err, core.ErrUnknownEventType) || core.IsPermanent(err) {
		t.Fatalf("fresh event of an unknown type: err = %v (permanent %v), want a transient ErrUnknownEventType", err, core.IsPermanent(err))
	}
}

// TestMuxUnknownTypePolicies drives each policy across its window with a
// fake clock: transient while the window is open, permanent once it closed,
// and always an ErrUnknownEventType.
func TestMuxUnknownTypePolicies(t *testing.T) {
	created := start.Add(-time.Hour) // start: the fake clock's now
	type check struct {
		createdAt time.Time
		permanent bool
	}
	for _, tc := range []struct {
		name   string
		opts   []core.MuxOption
		checks []check
	}{
		{"Default", nil, []check{
			{created.Add(time.Second), false}, // 59m59s old
			{created, true},                   // exactly the window
			{created.Add(-time.Second), true},
			{start.Add(time.Minute), false}, // created "later" on a skewed producer clock
			{time.Time{}, true},             // cannot be aged
		}},
		{"RetryUnknownTypesFor", []core.MuxOption{core.RetryUnknownTypesFor(10 * time.Minute)}, []check{
			{start.Add(-10*time.Minute + time.Second), false},
			{start.Add(-10 * time.Minute), true},
		}},
		{"DeadLetterUnknownTypes", []core.MuxOption{core.DeadLetterUnknownTypes()}, []check{
			{start, true},
			{start.Add(time.Hour), true},
		}},
		{"RetryUnknownTypesForever", []core.MuxOption{core.RetryUnknownTypesForever()}, []check{
			{start.Add(-365 * 24 * time.Hour), false},
			{time.Time{}, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := coretest.NewFakeClock(start)
			mux := core.NewMux(append(tc.opts, core.MuxClock(clock))...)
			mux.RegisterFunc("known", func(context.Context, core.Event) error { return nil })
			for _, c := range tc.checks {
				err := mux.Handle(context.Background(), core.Event{Type: "unknown", CreatedAt: c.createdAt})
				if !errors.Is(err, core.ErrUnknownEventType) || core.IsPermanent(err) != c.permanent {
					t.Errorf("created %v before now: err = %v (permanent %v), want ErrUnknownEventType, permanent %v",
						start.Sub(c.createdAt), err, core.IsPermanent(err), c.permanent)
				}
			}
			if err := mux.Handle(context.Background(), core.Event{Type: "known", CreatedAt: created.Add(-time.Hour)}); err != nil {
				t.Errorf("known type: %v", err)
			}
		})
	}
	// The window is measured on the Mux's clock, not taken once.
	clock := coretest.NewFakeClock(start)
	mux := core.NewMux(core.MuxClock(clock))
	e := core.Event{Type: "unknown", CreatedAt: start}
	if err := mux.Handle(context.Background(), e); core.IsPermanent(err) {
		t.Fatalf("new event dead-lettered: %v", err)
	}
	clock.Advance(core.DefaultUnknownTypeRetry)
	if err := mux.Handle(context.Background(), e); !core.IsPermanent(err) {
		t.Fatalf("event still unknown after the window: err = %v, want permanent", err)
	}
}
