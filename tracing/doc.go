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
// headers' trace context with its own. The transport carries them with the
// event (inside the signed CloudEvents body over QStash, as message metadata
// over Watermill); the consumer starts a "process" span as a
// child of the relay's span. The handler's own spans nest below. In a trace
// viewer the request, the publish and the processing appear as one trace,
// with the gap between write and publish in plain sight.
//
// # Write side
//
// The PostgreSQL store calls Config.BeforeAdd on every event it adds, with
// Add's ctx; NewInjector is such a hook. Configure it once, and service
// code passes its request's ctx to Add and nothing else:
//
//	store, err := postgres.New(pool, &postgres.Config{
//		BeforeAdd: tracing.NewInjector(opts...),
//	})
//	...
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// ... business writes through tx ...
//		return store.Add(ctx, tx, event) // carries ctx's trace context
//	})
//
// The hook edits copies: the caller's events keep their headers. A store
// without such a hook (memory.Store) takes Inject before Add instead:
//
//	tracing.Inject(ctx, events, opts...)
//	err = store.Add(ctx, events...)
//
// outboxwatermill.TxPublisher takes the same hook:
// TxPublisherConfig{BeforeAdd: tracing.NewInjector(opts...)} injects the
// trace context of each message's Context.
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
// RelayHook counts an event in MetricEventsSettled (and its attempts in
// MetricEventAttempts) only once the store recorded its outcome. When a
// settle fails, the batch counts once in MetricSettleErrors and each event
// whose outcome was not recorded counts in MetricEventsUnsettled, by outcome
// and error.type ("store", or "lease_lost" for the events another relay took
// over): those events are published again and counted as settled then, so
// summing MetricEventsSettled counts each event once per recorded decision.
//
// # Consumer
//
// HandlerMiddleware must run outside the deduplication step: Deduper then
// records on the consumer span whether the effect ran (DedupeAppliedKey) or
// was a suppressed duplicate, and counts duplicates, so a duplicate
// delivery still shows in its trace, as a consumer span with no handler
// spans below it. A qstash.Receiver runs the deduplication itself and takes
// the middleware that goes around it in ReceiverConfig.Middleware:
//
//	dedup, err := postgres.NewDeduper(pool, nil)
//	...
//	receiver, err := qstash.NewReceiver(&qstash.ReceiverConfig{
//		// signing keys, URL, ...
//		Handler:    mux,
//		Middleware: []core.HandlerMiddleware{tracing.HandlerMiddleware(opts...)},
//		Deduper:    tracing.Deduper(dedup, opts...),
//		Consumer:   "shipping",
//	})
//
// (On ReceiverConfig.Handler instead, HandlerMiddleware would run inside the
// Deduper: duplicates would get no span, and the decision would not be
// recorded.) Elsewhere, chain the handler yourself, in the same order:
//
//	h := core.ChainHandler(mux,
//		tracing.HandlerMiddleware(opts...),
//		core.Recover(),
//		core.Idempotent(tracing.Deduper(dedup, opts...), "shipping"))
//
// A Watermill handler whose subscriber is a broker's own (watermill-nats,
// say) rebuilds the event with outboxwatermill.EventFromMessage and runs h
// on it with msg.Context(); since a message does not carry its topic, give
// the consumer's options WithDestination for the subscribed topic. Given
// ContextFor: tracing.NewExtractor(opts...), the outboxwatermill
// OutboxSubscriber and the qstashsub.Subscriber also put the event's trace
// context in msg.Context(), so a handler that only starts spans from
// msg.Context() joins the trace as well.
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
