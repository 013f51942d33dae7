package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/tracing"
)

// apiPropagators is W3C trace context and baggage, from the OTel API alone:
// these tests need no SDK.
var apiPropagators = tracing.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

type extractKey struct{}

func TestNewExtractorContinuesTheEventsTrace(t *testing.T) {
	t.Parallel()
	extract := tracing.NewExtractor(apiPropagators)
	e := core.Event{ID: core.NewID(), Type: "t", Headers: map[string]string{
		// HTTP-canonical spelling, as some transports deliver it.
		"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"baggage":     "tenant=acme",
	}}
	parent := context.WithValue(context.Background(), extractKey{}, "kept")

	ctx := extract(parent, e)

	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sc.SpanID().String() != "b7ad6b7169203331" ||
		!sc.IsRemote() || !sc.IsSampled() {
		t.Errorf("span context %+v, want the remote, sampled parent the traceparent names", sc)
	}
	if got := baggage.FromContext(ctx).Member("tenant").Value(); got != "acme" {
		t.Errorf("baggage tenant = %q, want acme", got)
	}
	if ctx.Value(extractKey{}) != "kept" {
		t.Error("the extracted context lost the values of the context it was given")
	}
}

func TestNewExtractorReadsWhatNewInjectorWrote(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	want := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	e := core.Event{ID: core.NewID(), Type: "t"}
	tracing.NewInjector(apiPropagators)(trace.ContextWithSpanContext(context.Background(), want), &e)

	got := trace.SpanContextFromContext(tracing.NewExtractor(apiPropagators)(context.Background(), e))
	if !got.Equal(want.WithRemote(true)) {
		t.Errorf("extracted %+v from headers %v, want %+v", got, e.Headers, want)
	}
}

func TestNewExtractorWithoutTraceContext(t *testing.T) {
	t.Parallel()
	extract := tracing.NewExtractor(apiPropagators)
	for name, h := range map[string]map[string]string{
		"nil headers":     nil,
		"custom only":     {"tenant": "acme"},
		"bad traceparent": {"traceparent": "00-not-a-trace-01"},
	} {
		ctx := extract(context.Background(), core.Event{ID: core.NewID(), Type: "t", Headers: h})
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			t.Errorf("%s: span context %+v, want none", name, sc)
		}
	}
}
