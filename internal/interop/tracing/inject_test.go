package tracing_test

import (
	"context"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/tracing"
)

func TestInjectCopiesHeadersOnWrite(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	ctx, span := env.Tracer().Start(context.Background(), "request")
	defer span.End()
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx = baggage.ContextWithBaggage(ctx, bag)

	// Two events share one header map holding stale trace context under
	// HTTP-canonical names; the caller keeps a reference to it.
	shared := map[string]string{"x-custom": "kept", "Traceparent": "00-stale", "tracestate": "stale=1"}
	before := maps.Clone(shared)
	a, b, c := interoptest.MustEvent(t, "a"), interoptest.MustEvent(t, "b"), interoptest.MustEvent(t, "c")
	a.Headers, b.Headers = shared, shared
	events := []core.Event{a, b, c}

	tracing.Inject(ctx, events, env.Opts...)

	if !maps.Equal(shared, before) {
		t.Fatalf("shared header map modified: %v, was %v", shared, before)
	}
	for i, e := range events {
		if got := traceparentOf(t, e.Headers); got.SpanID() != span.SpanContext().SpanID() {
			t.Errorf("event %d: traceparent names span %s, want the request span %s", i, got.SpanID(), span.SpanContext().SpanID())
		}
		if e.Headers["baggage"] != "tenant=acme" {
			t.Errorf("event %d: baggage = %q, want tenant=acme", i, e.Headers["baggage"])
		}
		if _, stale := e.Headers["Traceparent"]; stale {
			t.Errorf("event %d: stale Traceparent kept beside the new one: %v", i, e.Headers)
		}
		if _, stale := e.Headers["tracestate"]; stale {
			t.Errorf("event %d: stale tracestate outlived its traceparent: %v", i, e.Headers)
		}
	}
	if events[0].Headers["x-custom"] != "kept" || events[1].Headers["x-custom"] != "kept" {
		t.Errorf("custom headers lost: %v", events[0].Headers)
	}
	events[0].Headers["probe"] = "1"
	if _, leaked := events[1].Headers["probe"]; leaked {
		t.Error("events that shared a map still share one after Inject")
	}
}

func TestInjectWithoutTraceContextLeavesEventsAlone(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	e := interoptest.MustEvent(t, "a")
	own := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	e.Headers = own
	events := []core.Event{e, interoptest.MustEvent(t, "b")}

	tracing.Inject(context.Background(), events, env.Opts...)

	if events[1].Headers != nil {
		t.Errorf("event without headers got %v from a context with no trace", events[1].Headers)
	}
	if !maps.Equal(events[0].Headers, own) {
		t.Errorf("event's own trace context replaced by nothing: %v", events[0].Headers)
	}
}

func TestNewInjectorIsAWriteHook(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	// Any hook field of this shape accepts the injector.
	var hook func(ctx context.Context, e *core.Event) = tracing.NewInjector(env.Opts...)

	ctx, span := env.Tracer().Start(context.Background(), "request")
	defer span.End()
	e := interoptest.MustEvent(t, "a")
	hook(ctx, &e)
	if got := traceparentOf(t, e.Headers); got.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("hook injected span %s, want %s", got.SpanID(), span.SpanContext().SpanID())
	}
}

func TestGlobalPropagatorIsTheDefault(t *testing.T) {
	t.Parallel()
	// No WithPropagators: the global propagator applies, and until a program
	// sets one it propagates nothing. That is OpenTelemetry's contract, and
	// why the package documentation says to set it.
	env := interoptest.NewOTelEnv(t)
	ctx, span := env.Tracer().Start(context.Background(), "request")
	defer span.End()
	events := []core.Event{interoptest.MustEvent(t, "a")}
	tracing.Inject(ctx, events, tracing.WithTracerProvider(env.TP))
	if events[0].Headers != nil {
		t.Fatalf("the default global propagator injected %v", events[0].Headers)
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("test setup: no span in ctx")
	}
}
