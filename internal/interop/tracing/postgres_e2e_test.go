package tracing_test

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
	"github.com/outboxkit/outboxkit/tracing"
)

// TestEndToEndPostgresQStashDuplicate follows one event through the
// production wiring: a request writes an order and its event in one pgx
// transaction to a postgres Store whose BeforeAdd is NewInjector; a relay
// with PublisherMiddleware and RelayHook publishes it with qstash.Publisher
// to qstashdev, which delivers it to a qstash.Receiver whose Middleware is
// HandlerMiddleware and whose Deduper is the postgres Deduper wrapped by
// Deduper. The event is then replayed and delivered again: the duplicate
// must get a consumer span of its own in the same trace, marked as not
// applied, and be counted.
func TestEndToEndPostgresQStashDuplicate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	// The receiver's URL is the signature's subject: listen first, serve
	// later.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hookURL := "http://" + ln.Addr().String() + "/hooks/orders"
	env := interoptest.NewOTelEnv(t,
		tracing.WithMeterProvider(mp),
		tracing.WithMessagingSystem("qstash"),
		tracing.WithDestination(func(core.Event) string { return hookURL }))
	db := interoptest.NewOutbox(t, env.Opts...)

	// QStash itself would answer the replayed publish "deduplicated" (the
	// event ID is the deduplication ID) for ten minutes; a window of a
	// nanosecond lets the second delivery through, so that the consumer's
	// Deduper is what stops the effect.
	dev, err := qstashdev.New(qstashdev.Config{DeduplicationWindow: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	devSrv := httptest.NewServer(dev.Handler())
	defer func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		devSrv.Close()
	}()

	deduper, err := postgres.NewDeduper(db.Pool, &postgres.DeduperConfig{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               hookURL,
		Handler:           db.ShipHandler(env),
		Middleware:        []core.HandlerMiddleware{tracing.HandlerMiddleware(env.Opts...)},
		Deduper:           tracing.Deduper(deduper, env.Opts...),
		Consumer:          "shipping",
	})
	if err != nil {
		t.Fatal(err)
	}
	recvSrv := httptest.NewUnstartedServer(receiver)
	recvSrv.Listener.Close()
	recvSrv.Listener = ln
	recvSrv.Start()
	defer recvSrv.Close()

	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     devSrv.URL,
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: hookURL},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	relay, err := core.NewRelay(db.Store, pub, &core.RelayConfig{
		Middleware: []core.PublisherMiddleware{tracing.PublisherMiddleware(env.Opts...)},
		Hooks:      []core.RelayHook{tracing.RelayHook(env.Opts...)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// deliver publishes what is due and waits until qstashdev has delivered
	// it: the consumer span ends before the receiver answers, so once
	// qstashdev is idle every span of the delivery is recorded.
	deliver := func(what string) {
		t.Helper()
		if n, err := relay.Drain(ctx); err != nil || n != 1 {
			t.Fatalf("%s: Drain = %d, %v; want 1 event", what, n, err)
		}
		if err := dev.WaitIdle(ctx); err != nil {
			t.Fatalf("%s: waiting for the delivery: %v", what, err)
		}
		if got := dev.DLQ(); len(got) != 0 {
			t.Fatalf("%s: delivery failed into the DLQ: %+v", what, got)
		}
	}

	reqCtx, req := env.Tracer().Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	e := interoptest.MustEvent(t, "order.placed")
	e.AggregateType, e.AggregateID = "order", "42"
	db.PlaceOrder(reqCtx, t, "42", e)
	req.End()

	stored, err := db.Store.Get(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sc := traceparentOf(t, stored.Headers); sc.SpanID() != req.SpanContext().SpanID() {
		t.Fatalf("stored traceparent names span %s, want the request span %s (BeforeAdd)", sc.SpanID(), req.SpanContext().SpanID())
	}

	// First delivery: the effect runs.
	deliver("first delivery")
	request := env.OneSpan(t, "POST /orders", core.ID{})
	publish := env.OneSpan(t, "publish "+hookURL, e.ID)
	process := env.OneSpan(t, "process "+hookURL, e.ID)
	ship := env.OneSpan(t, "ship order", core.ID{})
	traceID := request.SpanContext().TraceID()
	interoptest.SameTrace(t, traceID, publish, process, ship)
	interoptest.WantParent(t, publish, request)
	interoptest.WantParent(t, process, publish)
	interoptest.WantParent(t, ship, process)
	if publish.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds: publish %v, process %v; want producer, consumer", publish.SpanKind(), process.SpanKind())
	}
	interoptest.WantAttrs(t, process,
		attribute.Bool(string(tracing.DedupeAppliedKey), true),
		attribute.String(string(tracing.ConsumerKey), "shipping"),
		attribute.String("messaging.system", "qstash"))
	if n := db.Shipments(t); n != 1 {
		t.Fatalf("%d shipments after the first delivery, want 1", n)
	}

	// Second delivery of the same event: an operator replays it.
	if n, err := db.Store.Replay(ctx, core.ReplayFilter{IDs: []core.ID{e.ID}}); err != nil || n != 1 {
		t.Fatalf("Replay = %d, %v; want 1 event", n, err)
	}
	deliver("replayed delivery")
	publish2 := otherSpan(t, env.SpansNamed("publish "+hookURL), publish)
	process2 := otherSpan(t, env.SpansNamed("process "+hookURL), process)
	interoptest.SameTrace(t, traceID, publish2, process2)
	// The stored headers still name the request: the replay's publish is
	// the request's child too, and the duplicate's consumer span is the
	// replay's.
	interoptest.WantParent(t, publish2, request)
	interoptest.WantParent(t, process2, publish2)
	interoptest.WantAttrs(t, process2,
		attribute.Bool(string(tracing.DedupeAppliedKey), false),
		attribute.String(string(tracing.ConsumerKey), "shipping"),
		attribute.String("messaging.message.id", e.ID.String()))
	if !hasEvent(process2, tracing.DuplicateEventName) {
		t.Errorf("duplicate's consumer span has no %q event; events %v", tracing.DuplicateEventName, process2.Events())
	}
	if got := env.SpansNamed("ship order"); len(got) != 1 {
		t.Errorf("%d handler spans, want 1: the duplicate must not run the handler", len(got))
	}
	if n := db.Shipments(t); n != 1 {
		t.Errorf("%d shipments after the duplicate, want 1", n)
	}

	ms := collect(t, reader)
	if got := point[int64](t, metricNamed(t, ms, tracing.MetricEventsDuplicates, "{event}"), tracing.ConsumerKey.String("shipping")); got != 1 {
		t.Errorf("%s = %d, want 1", tracing.MetricEventsDuplicates, got)
	}
	if got := point[int64](t, metricNamed(t, ms, tracing.MetricEventsSettled, "{event}"), tracing.OutcomeKey.String("published")); got != 2 {
		t.Errorf("published = %d, want 2 (the event and its replay)", got)
	}
}

// otherSpan returns the one span of spans that is not first, failing unless
// there are exactly two.
func otherSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, first sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	if len(spans) != 2 {
		t.Fatalf("%d spans %q, want 2 (one per delivery)", len(spans), first.Name())
	}
	for _, s := range spans {
		if s.SpanContext().SpanID() != first.SpanContext().SpanID() {
			return s
		}
	}
	t.Fatalf("both spans %q are the first one", first.Name())
	return nil
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, ev := range s.Events() {
		if ev.Name == name {
			return true
		}
	}
	return false
}
