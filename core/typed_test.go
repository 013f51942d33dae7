package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/core"
)

type orderPaid struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func TestTypedDecodesThePayload(t *testing.T) {
	mux := core.NewMux()
	var got orderPaid
	mux.Register("order.paid", core.Typed(func(_ context.Context, _ core.Event, p orderPaid) error { got = p; return nil }))
	e, err := core.NewEvent("order.paid", map[string]any{"order_id": "o-1", "cents": 1250, "note": "extra fields are ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if err := mux.Handle(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if got != (orderPaid{OrderID: "o-1", Cents: 1250}) {
		t.Fatalf("decoded %+v", got)
	}
}

func TestTypedHandlerErrorsPassThrough(t *testing.T) {
	boom := errors.New("boom")
	h := core.Typed(func(context.Context, core.Event, orderPaid) error { return boom })
	e, _ := core.NewEvent("order.paid", orderPaid{OrderID: "o-1"})
	if err := h.Handle(context.Background(), e); !errors.Is(err, boom) || core.IsPermanent(err) {
		t.Fatalf("handler error = %v; want boom, unchanged (transient)", err)
	}
}

func TestTypedDecodeErrorsArePermanent(t *testing.T) {
	base, _ := core.NewEvent("order.paid", orderPaid{})
	for _, tc := range []struct {
		name    string
		payload string
		strict  bool
	}{
		{"not JSON", `{"order_id":`, false},
		{"wrong shape", `{"order_id": 7}`, false},
		{"an array", `[1, 2]`, false},
		{"unknown field, strict", `{"order_id": "o-1", "extra": true}`, true},
		{"trailing data, strict", `{"order_id": "o-1"} {}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := base
			e.Payload = []byte(tc.payload)
			ran := false
			fn := func(context.Context, core.Event, orderPaid) error { ran = true; return nil }
			h := core.Typed(fn)
			if tc.strict {
				h = core.TypedStrict(fn)
			}
			err := h.Handle(context.Background(), e)
			if err == nil || !core.IsPermanent(err) || ran {
				t.Fatalf("Handle = %v (ran %v); want a permanent decode error, handler not called", err, ran)
			}
			if msg := err.Error(); !strings.Contains(msg, e.ID.String()) || !strings.Contains(msg, "order.paid") {
				t.Fatalf("error %q does not name the event's ID and type", msg)
			}
		})
	}
}

func TestTypedStrictAcceptsExactPayloads(t *testing.T) {
	e, _ := core.NewEvent("order.paid", orderPaid{OrderID: "o-1", Cents: 5})
	var got orderPaid
	h := core.TypedStrict(func(_ context.Context, _ core.Event, p orderPaid) error { got = p; return nil })
	if err := h.Handle(context.Background(), e); err != nil || got.Cents != 5 {
		t.Fatalf("TypedStrict = %v, %+v", err, got)
	}
}

// TestApplyOnceRoutesSequencedEvents: only sequenced events reach
// OnceInOrder, and only when the deduper offers it.
func TestApplyOnceRoutesSequencedEvents(t *testing.T) {
	d := &routingDeduper{}
	h := core.HandlerFunc(func(context.Context, core.Event) error { return nil })
	plain, _ := core.NewEvent("a", map[string]int{})
	seq := plain
	seq.AggregateType, seq.AggregateID, seq.Sequence = "order", "42", 3
	noID := seq
	noID.AggregateID = ""
	noSeq := seq
	noSeq.Sequence = 0
	for _, e := range []core.Event{plain, seq, noID, noSeq} {
		if _, err := core.ApplyOnce(context.Background(), d, "c", h, e); err != nil {
			t.Fatal(err)
		}
	}
	if d.once != 3 || d.inOrder != 1 {
		t.Fatalf("Once %d, OnceInOrder %d; want 3 and 1", d.once, d.inOrder)
	}
	// A plain Deduper gets every event through Once.
	pd := &plainDeduper{}
	if _, err := core.ApplyOnce(context.Background(), pd, "c", h, seq); err != nil || pd.once != 1 {
		t.Fatalf("plain deduper: %v, Once called %d times", err, pd.once)
	}
}

type plainDeduper struct{ once int }

func (d *plainDeduper) Once(ctx context.Context, _ core.DedupeKey, effect func(context.Context) error) (bool, error) {
	d.once++
	return true, effect(ctx)
}

type routingDeduper struct{ once, inOrder int }

func (d *routingDeduper) Once(ctx context.Context, _ core.DedupeKey, effect func(context.Context) error) (bool, error) {
	d.once++
	return true, effect(ctx)
}

func (d *routingDeduper) OnceInOrder(ctx context.Context, _ string, _ core.Event, effect func(context.Context) error) (bool, error) {
	d.inOrder++
	return true, effect(ctx)
}

func TestSequenceGapErrorMatches(t *testing.T) {
	err := core.RetryAfter(&core.SequenceGapError{Consumer: "c", AggregateType: "order", AggregateID: "1", Expected: 2, Got: 4}, core.DefaultGapRetryAfter)
	if !errors.Is(err, core.ErrSequenceGap) {
		t.Fatal("a SequenceGapError does not match ErrSequenceGap")
	}
	if after, ok := core.RetryAfterHint(err); !ok || after != core.DefaultGapRetryAfter {
		t.Fatalf("hint %v, %v", after, ok)
	}
	if !strings.Contains(err.Error(), "waiting for 2") {
		t.Fatalf("message %q", err)
	}
}
