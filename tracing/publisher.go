package tracing

import (
	"context"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
)

// PublisherMiddleware returns relay middleware (core.RelayConfig.Middleware)
// that gives every published event a producer span, "publish
// <destination>", in the trace of the request that wrote the event.
//
// The span's parent is the trace context found in the event's headers (put
// there by Inject or NewInjector), and it also links to that context. The
// semantic conventions allow either; parenting keeps the request, the relay
// and the consumer in one trace, which is what an operator wants to see, and
// the link keeps the creation context explicit for tools that follow links.
// The link carries opentracing.ref_type=child_of, since it points at the
// span's parent: Jaeger would otherwise show the parent as FOLLOWS_FROM.
// An event written without trace context gets a span under ctx's span, or a
// new trace.
//
// The producer span's context then replaces the trace context in the event
// handed to the wrapped publisher, so the consumer's span becomes a child of
// the publish. The events of the caller's slice are not modified: the
// wrapped publisher receives copies with new header maps.
//
// Each span ends when the batch's Publish returns, with that event's error
// (core.EventErrors) recorded and the span's status set to Error. For a
// single event, the wrapped publisher's ctx carries the producer span, so an
// instrumented HTTP client nests its spans under it; a batch has no single
// span to offer and gets ctx unchanged.
func PublisherMiddleware(opts ...Option) core.PublisherMiddleware {
	c := newConfig(opts)
	t := c.tracer()
	return func(next core.Publisher) core.Publisher {
		return &publisher{next: next, cfg: c, tracer: t}
	}
}

type publisher struct {
	next   core.Publisher
	cfg    *config
	tracer trace.Tracer
}

func (p *publisher) Publish(ctx context.Context, events []core.Event) (err error) {
	if len(events) == 0 {
		return p.next.Publish(ctx, events)
	}
	ambient := trace.SpanContextFromContext(ctx)
	out := make([]core.Event, len(events))
	spans := make([]trace.Span, len(events))
	defer func() {
		if v := recover(); v != nil {
			endPanicking(v, spans...)
		}
	}()
	var single context.Context
	for i, e := range events {
		parent := p.cfg.prop.Extract(ctx, HeaderCarrier(e.Headers))
		dest := p.cfg.destination(e)
		attrs := eventAttributes(p.cfg, e, dest, semconv.MessagingOperationTypeSend, "publish")
		attrs = append(attrs, EventAttemptsKey.Int(e.Attempts))
		if len(events) > 1 {
			// The conventions want the batch size only on spans of a batch
			// operation; each span here covers one Publish of the whole
			// batch.
			attrs = append(attrs, semconv.MessagingBatchMessageCount(len(events)))
		}
		spanCtx, span := p.tracer.Start(parent, spanName("publish", dest),
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithLinks(creationLink(trace.SpanContextFromContext(parent), ambient, true)...),
			trace.WithAttributes(attrs...),
		)
		spans[i] = span
		out[i] = e
		injectInto(spanCtx, p.cfg.prop, &out[i])
		single = spanCtx
	}
	pubCtx := ctx
	if len(events) == 1 {
		pubCtx = single
	}
	err = p.next.Publish(pubCtx, out)
	for i, perr := range core.EventErrors(len(events), err) {
		if perr != nil {
			fail(spans[i], perr)
		}
		spans[i].End()
	}
	return err
}

// Unwrap returns the wrapped publisher, for code that looks for optional
// capabilities of a transport through middleware.
func (p *publisher) Unwrap() core.Publisher { return p.next }
