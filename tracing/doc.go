// Package tracing carries OpenTelemetry trace context through the outbox,
// from the request that writes an event to the handler that applies it, and
// records the outbox's metrics. It imports the OpenTelemetry API only: the
// program chooses and configures the SDK and exporters.
//
// Every constructor takes the same Options. Without them it uses the global
// providers and propagator (otel.GetTracerProvider, otel.GetMeterProvider,
// otel.GetTextMapPropagator); pass WithTracerProvider, WithMeterProvider and
// WithPropagators to use others. Set the global propagator (or pass one) to
// W3C trace context and baggage, or nothing travels:
//
//	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
//		propagation.TraceContext{}, propagation.Baggage{}))
//	opts := []tracing.Option{tracing.WithMessagingSystem("qstash")}
//
// # One trace, four hops
//
// The request's span context is written into the event's Headers when the
// event is added (traceparent, tracestate, baggage). The relay, perhaps
// minutes later in another process, starts a producer span "publish" per
// event as a child of that context (and linked to it), and replaces the
// headers' trace context with its own. The transport carries the headers as
// CloudEvents binary-mode headers; the consumer starts a "process" span as a
// child of the relay's span. The handler's own spans nest below. In a trace
// viewer the request, the publish and the processing appear as one trace,
// with the gap between write and publish in plain sight.
//
// # Write side
//
// A store that takes a write hook, a func(ctx context.Context, e
// *core.Event) it calls on every event it adds, is configured once with
// NewInjector, so no service code has to remember to propagate anything:
//
//	hook := tracing.NewInjector(opts...) // the store's write hook
//
// For a store with no such hook, call Inject on the events before Add:
//
//	tracing.Inject(ctx, events, opts...)
//	err = store.Add(ctx, events...)
//
// # Relay
//
//	relay, err := core.NewRelay(store, publisher, &core.RelayConfig{
//		Middleware: []core.PublisherMiddleware{tracing.PublisherMiddleware(opts...)},
//		Hooks:      []core.RelayHook{tracing.RelayHook(opts...)},
//	})
//
// PublisherMiddleware makes the spans; RelayHook counts outcomes and times
// publishes. WithDestination names the topic or URL when events do not carry
// their own Destination.
//
// # Consumer
//
//	h := core.ChainHandler(mux,
//		tracing.HandlerMiddleware(opts...),
//		core.Recover(),
//		core.Idempotent(tracing.Deduper(deduper, opts...), "billing"))
//
// HandlerMiddleware must be outside core.Idempotent: Deduper records on the
// consumer span whether the effect ran (DedupeAppliedKey) or was a suppressed
// duplicate, and counts duplicates.
//
// # Store metrics
//
//	unregister, err := tracing.RegisterStoreMetrics(store, opts...)
//	defer unregister()
//
// Pending count, oldest pending age and dead-lettered count are read from the
// store (core.StatsReader) at each collection. Alert on the oldest pending
// age: it grows whenever events stop flowing, whatever the cause.
//
// The Metric* and *Key constants name every metric and attribute this
// package adds beside the semantic conventions' own.
package tracing
