package interoptest

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

// OTelEnv is a tracer provider recording every span, and the options that
// point the tracing package at it.
type OTelEnv struct {
	Rec  *tracetest.SpanRecorder
	TP   *sdktrace.TracerProvider
	Prop propagation.TextMapPropagator // W3C trace context and baggage
	Opts []tracing.Option              // TP and Prop, then the extra options
}

// NewOTelEnv returns an OTelEnv whose provider shuts down when the test
// ends.
func NewOTelEnv(t testing.TB, extra ...tracing.Option) *OTelEnv {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	opts := append([]tracing.Option{tracing.WithTracerProvider(tp), tracing.WithPropagators(prop)}, extra...)
	return &OTelEnv{Rec: rec, TP: tp, Prop: prop, Opts: opts}
}

// Tracer is the test's own tracer, for the request and handler spans.
func (o *OTelEnv) Tracer() trace.Tracer { return o.TP.Tracer("test") }

// SpansNamed returns the ended spans called name.
func (o *OTelEnv) SpansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.Rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// OneSpan returns the single ended span called name whose
// messaging.message.id is id (any id when id is zero), failing the test
// unless there is exactly one.
func (o *OTelEnv) OneSpan(t testing.TB, name string, id core.ID) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range o.SpansNamed(name) {
		if id.IsZero() || Attr(s, "messaging.message.id") == attribute.StringValue(id.String()) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range o.Rec.Ended() {
			names = append(names, s.Name())
		}
		t.Fatalf("want 1 span %q for event %v, found %d; ended spans: %v", name, id, len(found), names)
	}
	return found[0]
}

// Attr returns the value of span attribute key (an empty Value when
// absent).
func Attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// WantAttrs fails unless span s has every attribute in want.
func WantAttrs(t testing.TB, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	for _, kv := range want {
		if got := Attr(s, string(kv.Key)); got != kv.Value {
			t.Errorf("span %q: %s = %q, want %q", s.Name(), kv.Key, got.Emit(), kv.Value.Emit())
		}
	}
}

// SameTrace fails for every span not in trace id.
func SameTrace(t testing.TB, id trace.TraceID, spans ...sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range spans {
		if got := s.SpanContext().TraceID(); got != id {
			t.Errorf("span %q in trace %s, want %s", s.Name(), got, id)
		}
	}
}

// WantParent fails unless child's parent is parent.
func WantParent(t testing.TB, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().TraceID() != parent.SpanContext().TraceID() || child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q has parent %s/%s, want %q (%s/%s)", child.Name(),
			child.Parent().TraceID(), child.Parent().SpanID(),
			parent.Name(), parent.SpanContext().TraceID(), parent.SpanContext().SpanID())
	}
}

// MustEvent returns a new event of type typ with a small JSON payload.
func MustEvent(t testing.TB, typ string) core.Event {
	t.Helper()
	e, err := core.NewEvent(typ, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
