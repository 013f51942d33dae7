package tracing_test

import (
	"context"
	"fmt"
	"sort"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/tracing"
)

// A request's trace context rides in the event's headers from the moment it
// is written.
func ExampleInject() {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

	ctx, span := tp.Tracer("shop").Start(context.Background(), "POST /orders")
	defer span.End()

	e, _ := core.NewEvent("order.placed", map[string]int{"order": 42})
	events := []core.Event{e}
	tracing.Inject(ctx, events, tracing.WithPropagators(prop))

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
	fmt.Println("caller's event untouched:", e.Headers == nil)
	// Output:
	// [traceparent]
	// caller's event untouched: true
}
