package tracing_test

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
	"github.com/outboxkit/outboxkit/tracing"
)

// TestEndToEndThroughQStash follows one event over real HTTP: a request
// writes it to the outbox, the relay publishes it with qstash.Publisher to a
// qstashdev server, which delivers it, signed, to a qstash.Receiver. The
// request, relay, consumer and handler spans must share one trace.
func TestEndToEndThroughQStash(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	// The receiver's URL must be known before the receiver is built (it is
	// the signature's subject), so listen first and serve later.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hookURL := "http://" + ln.Addr().String() + "/hooks/orders"
	env := interoptest.NewOTelEnv(t,
		tracing.WithMeterProvider(mp),
		tracing.WithMessagingSystem("qstash"),
		tracing.WithDestination(func(core.Event) string { return hookURL }))

	dev, err := qstashdev.New(qstashdev.Config{})
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

	// The consumer.
	handler := core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		_, span := env.Tracer().Start(ctx, "ship order")
		span.End()
		return nil
	})
	receiver, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               hookURL,
		Handler:           core.ChainHandler(handler, tracing.HandlerMiddleware(env.Opts...)),
		Deduper:           tracing.Deduper(memory.NewDeduper(), env.Opts...),
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

	// The producer side: outbox, relay, QStash publisher.
	store := memory.NewStore(nil)
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     devSrv.URL,
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: hookURL},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{
		Middleware: []core.PublisherMiddleware{tracing.PublisherMiddleware(env.Opts...)},
		Hooks:      []core.RelayHook{tracing.RelayHook(env.Opts...)},
	})
	if err != nil {
		t.Fatal(err)
	}

	reqCtx, req := env.Tracer().Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	e := interoptest.MustEvent(t, "order.placed")
	events := []core.Event{e}
	tracing.Inject(reqCtx, events, env.Opts...)
	if err := store.Add(reqCtx, events...); err != nil {
		t.Fatal(err)
	}
	req.End()

	if n, err := relay.Drain(ctx); err != nil || n != 1 {
		t.Fatalf("Drain = %d, %v; want 1 event", n, err)
	}
	if err := dev.WaitIdle(ctx); err != nil {
		t.Fatalf("waiting for the delivery: %v", err)
	}
	if got := dev.DLQ(); len(got) != 0 {
		t.Fatalf("delivery failed into the DLQ: %+v", got)
	}

	request := env.OneSpan(t, "POST /orders", core.ID{})
	publish := env.OneSpan(t, "publish "+hookURL, e.ID)
	process := env.OneSpan(t, "process "+hookURL, e.ID)
	ship := env.OneSpan(t, "ship order", core.ID{})
	traceID := request.SpanContext().TraceID()
	for name, got := range map[string]trace.TraceID{
		"publish": publish.SpanContext().TraceID(), "process": process.SpanContext().TraceID(), "ship order": ship.SpanContext().TraceID(),
	} {
		if got != traceID {
			t.Errorf("span %q in trace %s, want the request's %s", name, got, traceID)
		}
	}
	if publish.Parent().SpanID() != request.SpanContext().SpanID() {
		t.Errorf("relay span's parent = %s, want the request span", publish.Parent().SpanID())
	}
	if process.Parent().SpanID() != publish.SpanContext().SpanID() {
		t.Errorf("consumer span's parent = %s, want the relay span %s", process.Parent().SpanID(), publish.SpanContext().SpanID())
	}
	if ship.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Errorf("handler span's parent = %s, want the consumer span", ship.Parent().SpanID())
	}
	interoptest.WantAttrs(t, publish, attribute.String("messaging.system", "qstash"), attribute.String("messaging.message.id", e.ID.String()),
		attribute.String("messaging.destination.name", hookURL))
	interoptest.WantAttrs(t, process, attribute.String("messaging.system", "qstash"), attribute.String("messaging.message.id", e.ID.String()))

	ms := collect(t, reader)
	if got := point[int64](t, metricNamed(t, ms, tracing.MetricEventsSettled, "{event}"), attribute.String("outboxkit.outcome", "published")); got != 1 {
		t.Errorf("published = %d, want 1", got)
	}
}
