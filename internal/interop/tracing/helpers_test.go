package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/tracing"
)

// The span recorder, span assertions and event constructor these tests
// share with internal/interop/watermill are in internal/interop/interoptest;
// what only these tests need is here.

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
