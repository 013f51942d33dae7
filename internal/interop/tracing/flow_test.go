package tracing_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/tracing"
)

// TestOneTraceFromRequestToHandler follows one event through every hop: a
// request writes it (Inject) into the memory store, a relay publishes it
// through PublisherMiddleware, a transport carries it as CloudEvents headers
// to a consumer in "another process" (a fresh context), and the handler runs
// under HandlerMiddleware. All spans must form one trace.
func TestOneTraceFromRequestToHandler(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t,
		tracing.WithMessagingSystem("test-transport"),
		tracing.WithDestination(func(core.Event) string { return "orders" }))
	ctx := context.Background()
	store := memory.NewStore(nil)

	// The producing request.
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	reqCtx, req := env.Tracer().Start(baggage.ContextWithBaggage(ctx, bag), "request")
	placed := interoptest.MustEvent(t, "order.placed")
	placed.AggregateType, placed.AggregateID = "order", "42"
	rejected := interoptest.MustEvent(t, "order.rejected")
	events := []core.Event{placed, rejected}
	tracing.Inject(reqCtx, events, env.Opts...)
	if err := store.Add(reqCtx, events...); err != nil {
		t.Fatal(err)
	}
	req.End()

	// The consumer.
	var gotTenant string
	var handled int
	consumer := core.ChainHandler(core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		_, span := env.Tracer().Start(ctx, "apply "+e.Type)
		defer span.End()
		gotTenant = baggage.FromContext(ctx).Member("tenant").Value()
		handled++
		return nil
	}),
		tracing.HandlerMiddleware(env.Opts...),
		core.Idempotent(tracing.Deduper(memory.NewDeduper(), env.Opts...), "billing"))

	// The transport: CloudEvents headers on the wire, a fresh context on the
	// other side; it refuses rejected orders for good.
	transport := core.PublisherFunc(func(_ context.Context, evs []core.Event) error {
		be := core.NewBatchError(len(evs))
		for i, e := range evs {
			if e.Type == "order.rejected" {
				be.Set(i, core.Permanent(errors.New("rejected by the transport")))
				continue
			}
			delivered, err := core.EventFromCloudEventHeaders(core.CloudEventHeaders(e), e.Payload)
			if err != nil {
				be.Set(i, err)
				continue
			}
			be.Set(i, consumer.Handle(context.Background(), delivered))
		}
		return be.ErrOrNil()
	})

	relay, err := core.NewRelay(store, transport, &core.RelayConfig{
		Middleware: []core.PublisherMiddleware{tracing.PublisherMiddleware(env.Opts...)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Drain(ctx); err != nil || n != 2 {
		t.Fatalf("Drain = %d, %v; want 2 events settled", n, err)
	}
	if handled != 1 || gotTenant != "acme" {
		t.Fatalf("handled %d events with baggage tenant %q; want 1 and acme", handled, gotTenant)
	}

	request := env.OneSpan(t, "request", core.ID{})
	publish := env.OneSpan(t, "publish orders", placed.ID)
	process := env.OneSpan(t, "process orders", placed.ID)
	apply := env.OneSpan(t, "apply order.placed", core.ID{})

	traceID := request.SpanContext().TraceID()
	for _, s := range []interface {
		Name() string
		SpanContext() trace.SpanContext
	}{publish, process, apply} {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q is in trace %s, want the request's %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
	}
	if publish.Parent().SpanID() != request.SpanContext().SpanID() {
		t.Errorf("relay span's parent = %s, want the request span %s", publish.Parent().SpanID(), request.SpanContext().SpanID())
	}
	if !hasLink(publish, request.SpanContext()) {
		t.Errorf("relay span does not link to the request span; links %v", publish.Links())
	}
	if process.Parent().SpanID() != publish.SpanContext().SpanID() {
		t.Errorf("consumer span's parent = %s, want the relay span %s", process.Parent().SpanID(), publish.SpanContext().SpanID())
	}
	if apply.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Errorf("handler span's parent = %s, want the consumer span %s", apply.Parent().SpanID(), process.SpanContext().SpanID())
	}
	if publish.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds: publish %v, process %v; want producer, consumer", publish.SpanKind(), process.SpanKind())
	}
	common := []attribute.KeyValue{
		attribute.String("messaging.system", "test-transport"),
		attribute.String("messaging.message.id", placed.ID.String()),
		attribute.String("messaging.destination.name", "orders"),
		attribute.String("cloudevents.event_type", "order.placed"),
		attribute.String("cloudevents.event_subject", "42"),
	}
	interoptest.WantAttrs(t, publish, append(common, attribute.String("messaging.operation.type", "send"), attribute.Int("outboxkit.event.attempts", 1))...)
	interoptest.WantAttrs(t, process, append(common, attribute.String("messaging.operation.type", "process"), attribute.Bool("outboxkit.dedupe.applied", true))...)

	failed := env.OneSpan(t, "publish orders", rejected.ID)
	if failed.Status().Code != codes.Error {
		t.Errorf("rejected publish status = %v, want error", failed.Status())
	}
	if failed.SpanContext().TraceID() != traceID || failed.Parent().SpanID() != request.SpanContext().SpanID() {
		t.Errorf("rejected publish is not a child of the request span")
	}
	interoptest.WantAttrs(t, failed, attribute.String("error.type", "permanent"), attribute.Bool("outboxkit.error.permanent", true))
	if got := env.SpansNamed("process orders"); len(got) != 1 {
		t.Errorf("%d consumer spans, want 1 (the rejected event never reached the consumer)", len(got))
	}

	st, err := store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.DeadLettered != 1 {
		t.Errorf("store stats = %+v, want nothing pending and one dead letter", st)
	}
}
