package watermill_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/internal/wmtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/tracing"
)

// TestEndToEndPostgresThroughNATSJetStream follows one event through a
// Watermill transport: a request writes it to a postgres Store whose
// BeforeAdd is NewInjector; a relay with PublisherMiddleware hands it to
// outboxwatermill.Publisher over a watermill-nats JetStream publisher; a
// Watermill Router consumes it with the watermill-nats subscriber and runs
// the handler under HandlerMiddleware on the event EventFromMessage
// rebuilds. Only the traceparent metadata crosses the broker, and the
// request, publish, process and handler spans must form one trace.
func TestEndToEndPostgresThroughNATSJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	topic := wmtest.NATSStream(t) + ".orders"
	env := interoptest.NewOTelEnv(t, tracing.WithMessagingSystem("nats"))
	db := interoptest.NewOutbox(t, env.Opts...)

	// The consumer: a Router over the watermill-nats subscriber.
	sub := wmtest.NATSSubscriber(t)
	deduper, err := postgres.NewDeduper(db.Pool, &postgres.DeduperConfig{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	// The event EventFromMessage rebuilds has no Destination (a message
	// does not carry its topic), so the consumer names the topic it
	// subscribed to.
	consumerOpts := append(env.Opts[:len(env.Opts):len(env.Opts)],
		tracing.WithDestination(func(core.Event) string { return topic }))
	consume := core.ChainHandler(db.ShipHandler(env),
		tracing.HandlerMiddleware(consumerOpts...),
		core.Idempotent(tracing.Deduper(deduper, consumerOpts...), "shipping"))
	handled := make(chan error, 1)
	router := newRouter(t)
	router.AddConsumerHandler("shipping", topic, sub, func(msg *message.Message) error {
		e, err := outboxwatermill.EventFromMessage(msg)
		if err == nil {
			// The consumer span ends inside Handle: once handled
			// receives, it is recorded.
			err = consume.Handle(msg.Context(), e)
		}
		select {
		case handled <- err:
		default: // a redelivery after the first result: the checks below count spans
		}
		return err
	})
	wmtest.RunRouter(t, router)

	// The producer side: outbox, relay, Watermill NATS publisher.
	bridge, err := outboxwatermill.NewPublisher(wmtest.NATSPublisher(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := core.NewRelay(db.Store, bridge, &core.RelayConfig{
		Middleware: []core.PublisherMiddleware{tracing.PublisherMiddleware(env.Opts...)},
	})
	if err != nil {
		t.Fatal(err)
	}

	reqCtx, req := env.Tracer().Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	e := interoptest.MustEvent(t, "order.placed")
	e.AggregateType, e.AggregateID, e.Destination = "order", "7", topic
	db.PlaceOrder(reqCtx, t, "7", e)
	req.End()

	if n, err := relay.Drain(ctx); err != nil || n != 1 {
		t.Fatalf("Drain = %d, %v; want 1 event", n, err)
	}
	select {
	case err := <-handled:
		if err != nil {
			t.Fatalf("handler: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("the event never reached the handler: %v", ctx.Err())
	}

	request := env.OneSpan(t, "POST /orders", core.ID{})
	publish := env.OneSpan(t, "publish "+topic, e.ID)
	process := env.OneSpan(t, "process "+topic, e.ID)
	ship := env.OneSpan(t, "ship order", core.ID{})
	interoptest.SameTrace(t, request.SpanContext().TraceID(), publish, process, ship)
	interoptest.WantParent(t, publish, request)
	interoptest.WantParent(t, process, publish)
	interoptest.WantParent(t, ship, process)
	if publish.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds: publish %v, process %v; want producer, consumer", publish.SpanKind(), process.SpanKind())
	}
	interoptest.WantAttrs(t, publish, attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", topic))
	interoptest.WantAttrs(t, process, attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", topic),
		attribute.Bool(string(tracing.DedupeAppliedKey), true))
	if n := db.Shipments(t); n != 1 {
		t.Errorf("%d shipments, want 1", n)
	}
}

// TestEndToEndPostgresThroughOutboxSubscriber takes the other consumer path
// of the Watermill guide: PostgreSQL as the broker. A Router consumes the
// topic with outboxwatermill.OutboxSubscriber, whose relay runs
// PublisherMiddleware and whose ContextFor is tracing.NewExtractor, and the
// handler starts its span from msg.Context() alone, which the subscriber
// fills from the event's headers. Each handler span must be the child of
// its event's producer span, itself the request's child. The request writes
// two events so that the relay's batch holds both: the hand-off then has no
// single producer span in its ctx, and the trace context can only come from
// the headers.
func TestEndToEndPostgresThroughOutboxSubscriber(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	const topic = "orders"
	env := interoptest.NewOTelEnv(t, tracing.WithMessagingSystem("postgresql"))
	db := interoptest.NewOutbox(t, env.Opts...)

	// The relay hook reports each settled batch: by then the hand-off's
	// Publish has returned and its producer spans have ended.
	settled := make(chan core.SettleInfo, 4)
	osub, err := outboxwatermill.NewOutboxSubscriber(db.Store, &outboxwatermill.OutboxSubscriberConfig{
		Middleware: []core.PublisherMiddleware{tracing.PublisherMiddleware(env.Opts...)},
		Hooks:      []core.RelayHook{settleHook(settled)},
		ContextFor: tracing.NewExtractor(env.Opts...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = osub.Close() })
	router := newRouter(t)
	router.AddConsumerHandler("shipping", topic, osub, func(msg *message.Message) error {
		_, span := env.Tracer().Start(msg.Context(), "ship order",
			trace.WithAttributes(attribute.String("messaging.message.id", msg.UUID)))
		span.End()
		return nil
	})
	wmtest.RunRouter(t, router)

	reqCtx, req := env.Tracer().Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	placed, paid := interoptest.MustEvent(t, "order.placed"), interoptest.MustEvent(t, "order.paid")
	placed.Destination, paid.Destination = topic, topic
	db.PlaceOrder(reqCtx, t, "9", placed, paid)
	req.End()

	published := map[core.ID]bool{}
	for len(published) < 2 {
		select {
		case info := <-settled:
			for _, o := range info.Outcomes {
				if o.Kind != core.Published {
					t.Fatalf("event %s settled %v (%s), want published", o.ID, o.Kind, o.Error)
				}
				published[o.ID] = true
			}
		case <-ctx.Done():
			t.Fatalf("%d of 2 events acknowledged: %v", len(published), ctx.Err())
		}
	}

	request := env.OneSpan(t, "POST /orders", core.ID{})
	for _, e := range []core.Event{placed, paid} {
		publish := env.OneSpan(t, "publish "+topic, e.ID)
		ship := env.OneSpan(t, "ship order", e.ID)
		interoptest.SameTrace(t, request.SpanContext().TraceID(), publish, ship)
		interoptest.WantParent(t, publish, request)
		interoptest.WantParent(t, ship, publish)
	}
}

// newRouter returns a Router that gives handlers 10s to finish on close.
func newRouter(t *testing.T) *message.Router {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	return router
}

// settleHook sends every settled batch on ch, dropping those it has no room
// for.
type settleHook chan<- core.SettleInfo

func (h settleHook) AfterSettle(_ context.Context, info core.SettleInfo) {
	select {
	case h <- info:
	default:
	}
}
