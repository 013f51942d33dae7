package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/tracing"
)

// natsURL is the NATS server (with JetStream) CI starts.
const natsURL = "nats://127.0.0.1:4222"

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

	topic := natsStream(t) + ".orders"
	env := newOtelEnv(t, tracing.WithMessagingSystem("nats"))
	db := newTracedOutbox(t, env.opts...)
	wmConfig := wmnats.JetStreamConfig{SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit()}}

	// The consumer: a Router over the watermill-nats subscriber.
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL:              natsURL,
		SubscribersCount: 1,
		AckWaitTimeout:   30 * time.Second,
		CloseTimeout:     5 * time.Second,
		JetStream:        wmConfig,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	deduper, err := postgres.NewDeduper(db.pool, &postgres.DeduperConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	// The event EventFromMessage rebuilds has no Destination (a message
	// does not carry its topic), so the consumer names the topic it
	// subscribed to.
	consumerOpts := append(env.opts[:len(env.opts):len(env.opts)],
		tracing.WithDestination(func(core.Event) string { return topic }))
	consume := core.ChainHandler(db.shipHandler(env),
		tracing.HandlerMiddleware(consumerOpts...),
		core.Idempotent(tracing.Deduper(deduper, consumerOpts...), "shipping"))
	handled := make(chan error, 1)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
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
	runCtx, stop := context.WithCancel(ctx)
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-routerDone; err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	select {
	case <-router.Running():
	case err := <-routerDone:
		t.Fatalf("router stopped before running: %v", err)
	}

	// The producer side: outbox, relay, Watermill NATS publisher.
	wpub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: natsURL, JetStream: wmConfig}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wpub.Close() })
	bridge, err := outboxwatermill.NewPublisher(wpub, nil)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := core.NewRelay(db.store, bridge, &core.RelayConfig{
		Middleware: []core.PublisherMiddleware{tracing.PublisherMiddleware(env.opts...)},
	})
	if err != nil {
		t.Fatal(err)
	}

	reqCtx, req := env.tracer().Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	e := mustEvent(t, "order.placed")
	e.AggregateType, e.AggregateID, e.Destination = "order", "7", topic
	db.placeOrder(reqCtx, t, "7", e)
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

	request := env.oneSpan(t, "POST /orders", core.ID{})
	publish := env.oneSpan(t, "publish "+topic, e.ID)
	process := env.oneSpan(t, "process "+topic, e.ID)
	ship := env.oneSpan(t, "ship order", core.ID{})
	sameTrace(t, request.SpanContext().TraceID(), publish, process, ship)
	wantParent(t, publish, request)
	wantParent(t, process, publish)
	wantParent(t, ship, process)
	if publish.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds: publish %v, process %v; want producer, consumer", publish.SpanKind(), process.SpanKind())
	}
	wantAttrs(t, publish, attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", topic))
	wantAttrs(t, process, attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", topic),
		attribute.Bool(string(tracing.DedupeAppliedKey), true))
	if n := db.shipments(t); n != 1 {
		t.Errorf("%d shipments, want 1", n)
	}
}

// natsStream creates a JetStream stream of its own for one test, capturing
// "<name>.>", and deletes it when the test ends. The adapter's tests do the
// same: watermill-nats' AutoProvision names a stream after the topic, which
// cannot hold dots.
func natsStream(t *testing.T) string {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS at %s is unreachable (%v): start it with JetStream (CI's .ci/run does)", natsURL, err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	name := "TRACETEST_" + strings.ToUpper(strings.ReplaceAll(core.NewID().String(), "-", "")[20:])
	if _, err := js.AddStream(&nats.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: nats.MemoryStorage}); err != nil {
		t.Fatalf("create JetStream stream: %v", err)
	}
	t.Cleanup(func() {
		if err := js.DeleteStream(name); err != nil {
			t.Errorf("delete stream %s: %v", name, err)
		}
	})
	return name
}

// TestEndToEndPostgresThroughOutboxSubscriber takes the other consumer path
// of the Watermill guide: PostgreSQL as the broker. A Router consumes the
// topic with outboxwatermill.OutboxSubscriber, whose relay runs
// PublisherMiddleware, and the handler starts its span from msg.Context()
// alone, which the subscriber fills from the event's headers. Each handler
// span must be the child of its event's producer span, itself the request's
// child. The request writes two events so that the relay's batch holds both:
// the hand-off then has no single producer span in its ctx, and the trace
// context can only come from the headers.
func TestEndToEndPostgresThroughOutboxSubscriber(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	const topic = "orders"
	env := newOtelEnv(t, tracing.WithMessagingSystem("postgresql"))
	db := newTracedOutbox(t, env.opts...)

	// The relay hook reports each settled batch: by then the hand-off's
	// Publish has returned and its producer spans have ended.
	settled := make(chan core.SettleInfo, 4)
	osub, err := outboxwatermill.NewOutboxSubscriber(db.store, &outboxwatermill.OutboxSubscriberConfig{
		Middleware:  []core.PublisherMiddleware{tracing.PublisherMiddleware(env.opts...)},
		Hooks:       []core.RelayHook{settleHook(settled)},
		ContextFor:  tracing.NewExtractor(env.opts...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = osub.Close() })
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddConsumerHandler("shipping", topic, osub, func(msg *message.Message) error {
		_, span := env.tracer().Start(msg.Context(), "ship order",
			trace.WithAttributes(attribute.String("messaging.message.id", msg.UUID)))
		span.End()
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-routerDone; err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	select {
	case <-router.Running():
	case err := <-routerDone:
		t.Fatalf("router stopped before running: %v", err)
	}

	reqCtx, req := env.tracer().Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	placed, paid := mustEvent(t, "order.placed"), mustEvent(t, "order.paid")
	placed.Destination, paid.Destination = topic, topic
	db.placeOrder(reqCtx, t, "9", placed, paid)
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

	request := env.oneSpan(t, "POST /orders", core.ID{})
	for _, e := range []core.Event{placed, paid} {
		publish := env.oneSpan(t, "publish "+topic, e.ID)
		ship := env.oneSpan(t, "ship order", e.ID)
		sameTrace(t, request.SpanContext().TraceID(), publish, ship)
		wantParent(t, publish, request)
		wantParent(t, ship, publish)
	}
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
