package tracing_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/tracing"
)

// orderingDeduper is a minimal in-memory core.SequencedDeduper.
type orderingDeduper struct {
	core.Deduper
	mu   sync.Mutex
	last map[string]int64
}

func (d *orderingDeduper) OnceInOrder(ctx context.Context, consumer string, e core.Event, effect func(context.Context) error) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := consumer + "/" + e.AggregateType + "/" + e.AggregateID
	switch l := d.last[k]; {
	case e.Sequence <= l:
		return false, nil
	case e.Sequence > l+1:
		return false, core.RetryAfter(&core.SequenceGapError{Consumer: consumer, AggregateID: e.AggregateID, EventID: e.ID, Expected: l + 1, Got: e.Sequence}, core.DefaultGapRetryAfter)
	}
	if err := effect(ctx); err != nil {
		return false, err
	}
	d.last[k] = e.Sequence
	return true, nil
}

// TestTracedSequencerStillOrders: wrapping a sequenced deduper keeps
// ApplyOnce ordering through it, and records stale events and gaps.
func TestTracedSequencerStillOrders(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	env := interoptest.NewOTelEnv(t, tracing.WithMeterProvider(mp))
	d := tracing.Deduper(&orderingDeduper{Deduper: memory.NewDeduper(), last: map[string]int64{}}, env.Opts...)
	if _, ok := d.(core.SequencedDeduper); !ok {
		t.Fatal("the traced deduper hides core.SequencedDeduper")
	}
	if _, ok := tracing.Deduper(memory.NewDeduper()).(core.SequencedDeduper); ok {
		t.Fatal("a traced plain Deduper claims to be sequenced")
	}
	var ran []int64
	h := core.ChainHandler(core.HandlerFunc(func(_ context.Context, e core.Event) error { ran = append(ran, e.Sequence); return nil }),
		tracing.HandlerMiddleware(env.Opts...), core.Idempotent(d, "billing"))
	ev := func(seq int64) core.Event {
		e := interoptest.MustEvent(t, "order.updated")
		e.AggregateType, e.AggregateID, e.Sequence = "order", "42", seq
		return e
	}
	e1, e2 := ev(1), ev(2)
	if err := h.Handle(context.Background(), e2); !errors.Is(err, core.ErrSequenceGap) {
		t.Fatalf("sequence 2 first = %v; want a gap", err)
	}
	for _, e := range []core.Event{e1, e2, e1} {
		if err := h.Handle(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(ran, []int64{1, 2}) {
		t.Fatalf("effects ran for %v, want [1 2]", ran)
	}
	spans := env.SpansNamed("process")
	if len(spans) != 4 {
		t.Fatalf("%d consumer spans, want 4", len(spans))
	}
	for i, want := range []string{"gap", "applied", "applied", "stale"} {
		interoptest.WantAttrs(t, spans[i], tracing.SequenceOutcomeKey.String(want))
	}
	if ev := spans[3].Events(); len(ev) != 1 || ev[0].Name != tracing.StaleEventName {
		t.Errorf("stale delivery's span events = %v", ev)
	}
	ms := collect(t, reader)
	billing := attribute.String("outboxkit.consumer", "billing")
	if n := point[int64](t, metricNamed(t, ms, tracing.MetricEventsStale, "{event}"), billing); n != 1 {
		t.Errorf("%s = %d, want 1", tracing.MetricEventsStale, n)
	}
	if n := point[int64](t, metricNamed(t, ms, tracing.MetricSequenceGaps, "{event}"), billing, tracing.SequenceOutcomeKey.String("gap")); n != 1 {
		t.Errorf("%s = %d, want 1", tracing.MetricSequenceGaps, n)
	}
}
