package tracing_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/tracing"
)

// recordingPublisher keeps what it was given and answers with err.
type recordingPublisher struct {
	got    []core.Event
	gotCtx context.Context
	err    error
}

func (p *recordingPublisher) Publish(ctx context.Context, events []core.Event) error {
	p.got = append([]core.Event(nil), events...)
	p.gotCtx = ctx
	return p.err
}

func TestPublisherMiddlewareSingleEvent(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t, tracing.WithMessagingSystem("qstash"))
	reqCtx, req := env.Tracer().Start(context.Background(), "request")
	e := interoptest.MustEvent(t, "order.placed")
	e.Destination = "https://billing.example/hooks"
	e.Attempts = 3
	events := []core.Event{e}
	tracing.Inject(reqCtx, events, env.Opts...)
	req.End()
	callerHeaders := maps.Clone(events[0].Headers)

	inner := &recordingPublisher{}
	if err := tracing.PublisherMiddleware(env.Opts...)(inner).Publish(context.Background(), events); err != nil {
		t.Fatal(err)
	}

	span := env.OneSpan(t, "publish https://billing.example/hooks", e.ID)
	if span.SpanKind() != trace.SpanKindProducer {
		t.Errorf("kind = %v, want producer", span.SpanKind())
	}
	if span.Parent().SpanID() != req.SpanContext().SpanID() || span.SpanContext().TraceID() != req.SpanContext().TraceID() {
		t.Errorf("producer span's parent = %v, want the request span %v", span.Parent(), req.SpanContext())
	}
	if !hasLink(span, req.SpanContext()) {
		t.Errorf("producer span does not link to the creation context; links: %v", span.Links())
	}
	// Jaeger keeps the parent reference CHILD_OF only when the link to the
	// parent says so.
	if got := refType(span, req.SpanContext()); got != "child_of" {
		t.Errorf("link to the parent has opentracing.ref_type %q, want child_of", got)
	}
	interoptest.WantAttrs(t, span,
		attribute.String("messaging.system", "qstash"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.destination.name", "https://billing.example/hooks"),
		attribute.String("messaging.message.id", e.ID.String()),
		attribute.String("cloudevents.event_type", "order.placed"),
		attribute.Int("outboxkit.event.attempts", 3),
	)
	if got := interoptest.Attr(span, "messaging.batch.message_count"); got.Type() != attribute.INVALID {
		t.Errorf("single-event publish has messaging.batch.message_count = %v", got.Emit())
	}
	if span.Status().Code != codes.Unset {
		t.Errorf("status = %v, want unset", span.Status())
	}

	// The transport sees the producer span's context; the caller's event is
	// untouched.
	if got := traceparentOf(t, inner.got[0].Headers); got.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("published traceparent names %s, want the producer span %s", got.SpanID(), span.SpanContext().SpanID())
	}
	if !maps.Equal(events[0].Headers, callerHeaders) {
		t.Errorf("caller's event headers modified: %v, were %v", events[0].Headers, callerHeaders)
	}
	if got := trace.SpanContextFromContext(inner.gotCtx); got.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("single-event publish ctx carries span %s, want the producer span", got.SpanID())
	}
}

func TestPublisherMiddlewareBatchOutcomes(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t, tracing.WithDestination(func(core.Event) string { return "orders" }))
	ok, slow, bad := interoptest.MustEvent(t, "ok"), interoptest.MustEvent(t, "slow"), interoptest.MustEvent(t, "bad")
	events := []core.Event{ok, slow, bad}

	be := core.NewBatchError(3)
	be.Set(1, errors.New("transport hiccup"))
	be.Set(2, core.Permanent(errors.New("rejected")))
	inner := &recordingPublisher{err: be}
	err := tracing.PublisherMiddleware(env.Opts...)(inner).Publish(context.Background(), events)
	if !errors.Is(err, be) {
		t.Fatalf("Publish returned %v, want the wrapped publisher's error", err)
	}

	for _, tc := range []struct {
		e         core.Event
		code      codes.Code
		errType   string
		permanent bool
	}{
		{ok, codes.Unset, "", false},
		{slow, codes.Error, "transient", false},
		{bad, codes.Error, "permanent", true},
	} {
		span := env.OneSpan(t, "publish orders", tc.e.ID)
		if span.Status().Code != tc.code {
			t.Errorf("%s: status = %v, want %v", tc.e.Type, span.Status(), tc.code)
		}
		interoptest.WantAttrs(t, span, attribute.Int("messaging.batch.message_count", 3))
		if span.Parent().IsValid() || len(span.Links()) != 0 {
			t.Errorf("%s: event without trace context got parent %v, links %v", tc.e.Type, span.Parent(), span.Links())
		}
		if tc.code != codes.Error {
			continue
		}
		interoptest.WantAttrs(t, span, attribute.String("error.type", tc.errType), attribute.Bool("outboxkit.error.permanent", tc.permanent))
		if len(span.Events()) == 0 || span.Events()[0].Name != "exception" {
			t.Errorf("%s: error not recorded as an exception event: %v", tc.e.Type, span.Events())
		}
	}
	// Each event travels with its own span's context, and a batch's publish
	// ctx is the caller's, since no single span stands for the batch.
	seen := map[trace.SpanID]bool{}
	for _, e := range inner.got {
		seen[traceparentOf(t, e.Headers).SpanID()] = true
	}
	if len(seen) != 3 {
		t.Errorf("3 events carry %d distinct producer spans", len(seen))
	}
	if trace.SpanContextFromContext(inner.gotCtx).IsValid() {
		t.Error("batch publish ctx carries one event's span")
	}
	for _, e := range events {
		if e.Headers != nil {
			t.Errorf("caller's event %s got headers %v", e.Type, e.Headers)
		}
	}
}

func TestPublisherMiddlewareWholeBatchFailure(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	inner := &recordingPublisher{err: context.DeadlineExceeded}
	events := []core.Event{interoptest.MustEvent(t, "a"), interoptest.MustEvent(t, "b")}
	_ = tracing.PublisherMiddleware(env.Opts...)(inner).Publish(ctx, events)
	spans := env.SpansNamed("publish")
	if len(spans) != 2 {
		t.Fatalf("%d publish spans, want 2", len(spans))
	}
	for _, s := range spans {
		if s.Status().Code != codes.Error {
			t.Errorf("status = %v, want error", s.Status())
		}
		interoptest.WantAttrs(t, s, attribute.String("error.type", "timeout"))
	}
}

func TestPublisherMiddlewarePanicEndsSpans(t *testing.T) {
	t.Parallel()
	env := interoptest.NewOTelEnv(t)
	boom := core.PublisherFunc(func(context.Context, []core.Event) error { panic("boom") })
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the publisher's panic", v)
			}
		}()
		_ = tracing.PublisherMiddleware(env.Opts...)(boom).Publish(context.Background(), []core.Event{interoptest.MustEvent(t, "a")})
	}()
	span := env.OneSpan(t, "publish", core.ID{})
	if span.Status().Code != codes.Error {
		t.Errorf("status = %v, want error", span.Status())
	}
}
