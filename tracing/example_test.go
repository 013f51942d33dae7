package tracing_test

import (
	"context"
	"fmt"
	"sort"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/tracing"
)

// A request's trace context rides in the event's headers from the moment it
// is written. In a service the context comes from the request's span; here
// a span context with fixed IDs stands in for it, so the example needs only
// the OpenTelemetry API and its output is exact.
func ExampleInject() {
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))

	e, _ := core.NewEvent("order.placed", map[string]int{"order": 42})
	events := []core.Event{e}
	tracing.Inject(ctx, events, tracing.WithPropagators(propagation.TraceContext{}))

	store := memory.NewStore(nil)
	if err := store.Add(ctx, events...); err != nil {
		fmt.Println(err)
		return
	}
	var names []string
	for k := range events[0].Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Println(names)
	fmt.Println("traceparent:", events[0].Headers["traceparent"])
	fmt.Println("caller's event untouched:", e.Headers == nil)
	// Output:
	// [traceparent]
	// traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// caller's event untouched: true
}
