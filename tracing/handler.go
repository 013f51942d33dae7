package tracing

import (
	"context"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
)

// HandlerMiddleware returns consumer middleware that runs each event's
// handler under a consumer span, "process <destination>", continuing the
// trace carried in the event's headers: its parent is the relay's producer
// span, so request, relay and consumer share one trace.
//
// When ctx already holds a span of its own (an HTTP server span from an
// instrumented receiver, say), two cases differ. If that span is in the
// event's trace (the server read the traceparent the transport forwarded),
// the consumer span nests under it. Otherwise the event's context still wins
// as the parent, since that is the trace the event belongs to, and the new
// span links to both, so neither is lost. Baggage sent with the event is in
// the handler's ctx.
//
// Put it outside core.Idempotent, so that Deduper can record the
// deduplication decision on the span:
//
//	h := core.ChainHandler(mux,
//		tracing.HandlerMiddleware(opts...),
//		core.Recover(),
//		core.Idempotent(tracing.Deduper(deduper, opts...), "billing"))
//
// With a qstash.Receiver, put it in ReceiverConfig.Middleware, not on
// Handler: Handler runs inside the Deduper, where duplicates never arrive.
//
// A failed handler's error is recorded and the span's status set to Error.
func HandlerMiddleware(opts ...Option) core.HandlerMiddleware {
	c := newConfig(opts)
	t := c.tracer()
	return func(next core.Handler) core.Handler {
		return core.HandlerFunc(func(ctx context.Context, e core.Event) (err error) {
			ambientSpan := trace.SpanFromContext(ctx)
			ambient := ambientSpan.SpanContext()
			parent := c.prop.Extract(ctx, HeaderCarrier(e.Headers))
			created := trace.SpanContextFromContext(parent)
			// An ambient span that already continues the event's trace (a
			// server span that read the forwarded traceparent) is the
			// better parent: nest under it, keeping the event's baggage.
			nest := ambient.IsValid() && created.IsValid() && !created.Equal(ambient) && ambient.TraceID() == created.TraceID()
			ls := creationLink(created, ambient, !nest)
			switch {
			case nest:
				parent = trace.ContextWithSpan(parent, ambientSpan)
			case len(ls) > 0 && ambient.IsValid():
				ls = append(ls, trace.Link{SpanContext: ambient})
			}
			dest := c.destination(e)
			ctx, span := t.Start(parent, spanName("process", dest),
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithLinks(ls...),
				trace.WithAttributes(eventAttributes(c, e, dest, semconv.MessagingOperationTypeProcess, "process")...),
			)
			defer func() {
				if v := recover(); v != nil {
					endPanicking(v, span)
				}
			}()
			err = next.Handle(ctx, e)
			if err != nil {
				fail(span, err)
			}
			span.End()
			return err
		})
	}
}
