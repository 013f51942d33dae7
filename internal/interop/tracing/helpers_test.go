package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/tracing"
)

// otelEnv is a tracer provider recording every span, and the options that
// point the package at it.
type otelEnv struct {
	rec  *tracetest.SpanRecorder
	tp   *sdktrace.TracerProvider
	prop propagation.TextMapPropagator
	opts []tracing.Option
}

func newOtelEnv(t *testing.T, extra ...tracing.Option) *otelEnv {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	opts := append([]tracing.Option{tracing.WithTracerProvider(tp), tracing.WithPropagators(prop)}, extra...)
	return &otelEnv{rec: rec, tp: tp, prop: prop, opts: opts}
}

func (o *otelEnv) tracer() trace.Tracer { return o.tp.Tracer("test") }

// spansNamed returns the ended spans called name.
func (o *otelEnv) spansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// oneSpan returns the single ended span called name whose messaging.message.id
// is id (any id when id is zero).
func (o *otelEnv) oneSpan(t *testing.T, name string, id core.ID) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range o.spansNamed(name) {
		if id.IsZero() || attr(s, "messaging.message.id") == attribute.StringValue(id.String()) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range o.rec.Ended() {
			names = append(names, s.Name())
		}
		t.Fatalf("want 1 span %q for event %v, found %d; ended spans: %v", name, id, len(found), names)
	}
	return found[0]
}

// attr returns the value of span attribute key (an empty Value when absent).
func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// wantAttrs fails unless span s has every attribute in want.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	for _, kv := range want {
		if got := attr(s, string(kv.Key)); got != kv.Value {
			t.Errorf("span %q: %s = %q, want %q", s.Name(), kv.Key, got.Emit(), kv.Value.Emit())
		}
	}
}

func hasLink(s sdktrace.ReadOnlySpan, sc trace.SpanContext) bool {
	_, ok := link(s, sc)
	return ok
}

// link returns the link of s to sc.
func link(s sdktrace.ReadOnlySpan, sc trace.SpanContext) (sdktrace.Link, bool) {
	for _, l := range s.Links() {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return l, true
		}
	}
	return sdktrace.Link{}, false
}

// refType returns the opentracing.ref_type attribute of the link of s to sc
// ("" when absent).
func refType(s sdktrace.ReadOnlySpan, sc trace.SpanContext) string {
	l, _ := link(s, sc)
	for _, kv := range l.Attributes {
		if kv.Key == "opentracing.ref_type" {
			return kv.Value.AsString()
		}
	}
	return ""
}

func mustEvent(t *testing.T, typ string) core.Event {
	t.Helper()
	e, err := core.NewEvent(typ, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// traceparentOf returns the span context a traceparent header names.
func traceparentOf(t *testing.T, h map[string]string) trace.SpanContext {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(), tracing.HeaderCarrier(h))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		t.Fatalf("headers %v carry no valid traceparent", h)
	}
	return sc
}
