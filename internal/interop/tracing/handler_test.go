package tracing_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/tracing"
)

func TestHandlerMiddlewareContinuesTheEventsTrace(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t, tracing.WithMessagingSystem("nats"))
	_, producer := env.Tracer().Start(context.Background(), "producer", trace.WithSpanKind(trace.SpanKindProducer))
	e := interoptest.MustEvent(t, "order.placed")
	events := []core.Event{e}
	tracing.Inject(trace.ContextWithSpan(context.Background(), producer), events, env.Opts...)
	producer.End()

	// The receiver's own server span is ambient in ctx.
	ctx, server := env.Tracer().Start(context.Background(), "POST /hooks", trace.WithSpanKind(trace.SpanKindServer))
	defer server.End()
	var inHandler trace.SpanContext
	h := tracing.HandlerMiddleware(env.Opts...)(core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return errors.New("database down")
	}))
	if err := h.Handle(ctx, events[0]); err == nil {
		t.Fatal("handler error swallowed")
	}

	span := env.OneSpan(t, "process", e.ID)
	if span.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kind = %v, want consumer", span.SpanKind())
	}
	if span.Parent().SpanID() != producer.SpanContext().SpanID() || span.SpanContext().TraceID() != producer.SpanContext().TraceID() {
		t.Errorf("consumer span parent = %v, want the producer span %v", span.Parent(), producer.SpanContext())
	}
	if !hasLink(span, producer.SpanContext()) || !hasLink(span, server.SpanContext()) {
		t.Errorf("consumer span should link to the producer and the ambient server span; links: %v", span.Links())
	}
	if got := refType(span, producer.SpanContext()); got != "child_of" {
		t.Errorf("link to the parent has opentracing.ref_type %q, want child_of", got)
	}
	if got := refType(span, server.SpanContext()); got != "" {
		t.Errorf("link to the unrelated server span has opentracing.ref_type %q, want none", got)
	}
	if inHandler.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("handler runs under span %s, want the consumer span", inHandler.SpanID())
	}
	interoptest.WantAttrs(t, span,
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.message.id", e.ID.String()),
		attribute.String("error.type", "transient"),
	)
	if span.Status().Code != codes.Error {
		t.Errorf("status = %v, want error", span.Status())
	}
}

func TestHandlerMiddlewareNestsUnderAServerSpanOfTheSameTrace(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	_, producer := env.Tracer().Start(context.Background(), "producer", trace.WithSpanKind(trace.SpanKindProducer))
	events := []core.Event{interoptest.MustEvent(t, "a")}
	tracing.Inject(trace.ContextWithSpan(context.Background(), producer), events, env.Opts...)
	producer.End()

	// An instrumented HTTP server extracted the forwarded traceparent: its
	// span is a child of the producer.
	serverCtx := env.Prop.Extract(context.Background(), tracing.HeaderCarrier(events[0].Headers))
	ctx, server := env.Tracer().Start(serverCtx, "POST /hooks", trace.WithSpanKind(trace.SpanKindServer))
	h := tracing.HandlerMiddleware(env.Opts...)(core.HandlerFunc(func(context.Context, core.Event) error { return nil }))
	if err := h.Handle(ctx, events[0]); err != nil {
		t.Fatal(err)
	}
	server.End()

	span := env.OneSpan(t, "process", events[0].ID)
	if span.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("consumer span parent = %s, want the server span %s", span.Parent().SpanID(), server.SpanContext().SpanID())
	}
	if !hasLink(span, producer.SpanContext()) || len(span.Links()) != 1 {
		t.Errorf("consumer span should link to the producer only; links: %v", span.Links())
	}
	if got := refType(span, producer.SpanContext()); got != "" {
		t.Errorf("link to the producer, not the parent here, has opentracing.ref_type %q", got)
	}
}

func TestHandlerMiddlewareWithoutTraceContext(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	h := tracing.HandlerMiddleware(env.Opts...)(core.HandlerFunc(func(context.Context, core.Event) error { return nil }))
	if err := h.Handle(context.Background(), interoptest.MustEvent(t, "a")); err != nil {
		t.Fatal(err)
	}
	span := env.OneSpan(t, "process", core.ID{})
	if span.Parent().IsValid() || len(span.Links()) != 0 {
		t.Errorf("root consumer span got parent %v, links %v", span.Parent(), span.Links())
	}
}

func TestHandlerMiddlewarePanicEndsSpan(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	h := core.ChainHandler(core.HandlerFunc(func(context.Context, core.Event) error { panic("boom") }),
		core.Recover(), tracing.HandlerMiddleware(env.Opts...))
	// Recover is outside: the panic goes through the middleware, which must
	// still end its span.
	var pe *core.PanicError
	if err := h.Handle(context.Background(), interoptest.MustEvent(t, "a")); !errors.As(err, &pe) {
		t.Fatalf("Handle = %v, want a *core.PanicError", err)
	}
	span := env.OneSpan(t, "process", core.ID{})
	interoptest.WantAttrs(t, span, attribute.String("error.type", "panic"))
}

func TestDeduperRecordsTheDecision(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	var applied int
	h := core.ChainHandler(core.HandlerFunc(func(context.Context, core.Event) error { applied++; return nil }),
		tracing.HandlerMiddleware(env.Opts...),
		core.Idempotent(tracing.Deduper(memory.NewDeduper(), env.Opts...), "billing"))
	e := interoptest.MustEvent(t, "a")
	for range 2 {
		if err := h.Handle(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if applied != 1 {
		t.Fatalf("effect applied %d times, want 1", applied)
	}
	spans := env.SpansNamed("process")
	if len(spans) != 2 {
		t.Fatalf("%d consumer spans, want 2", len(spans))
	}
	first, second := spans[0], spans[1]
	interoptest.WantAttrs(t, first, attribute.Bool("outboxkit.dedupe.applied", true), attribute.String("outboxkit.consumer", "billing"))
	interoptest.WantAttrs(t, second, attribute.Bool("outboxkit.dedupe.applied", false), attribute.String("outboxkit.consumer", "billing"))
	if len(first.Events()) != 0 {
		t.Errorf("first delivery has span events %v", first.Events())
	}
	if ev := second.Events(); len(ev) != 1 || ev[0].Name != tracing.DuplicateEventName {
		t.Errorf("duplicate delivery's span events = %v, want one %q", ev, tracing.DuplicateEventName)
	}
}

func TestDeduperFailedEffectRecordsNoDecision(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	d := tracing.Deduper(memory.NewDeduper(), env.Opts...)
	ctx, span := env.Tracer().Start(context.Background(), "process")
	applied, err := core.ApplyOnce(ctx, d, "billing", core.HandlerFunc(func(context.Context, core.Event) error {
		return errors.New("failed")
	}), interoptest.MustEvent(t, "a"))
	span.End()
	if applied || err == nil {
		t.Fatalf("ApplyOnce = %v, %v; want false and the effect's error", applied, err)
	}
	if got := interoptest.Attr(env.OneSpan(t, "process", core.ID{}), "outboxkit.dedupe.applied"); got.Type() != attribute.INVALID {
		t.Errorf("failed effect recorded a decision: %v", got.Emit())
	}
}

func TestDeduperUnwraps(t *testing.T) {
	t.Parallel()
	inner := memory.NewDeduper()
	d := tracing.Deduper(inner)
	u, ok := d.(interface{ Unwrap() core.Deduper })
	if !ok || u.Unwrap() != inner {
		t.Fatal("wrapped Deduper does not unwrap to the original")
	}
}
