package tracing

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
)

// eventAttributes are the attributes the producer and consumer spans share:
// the semantic conventions' messaging and CloudEvents attributes (the wire
// format is CloudEvents, so a backend that knows them can correlate both
// ends).
func eventAttributes(c *config, e core.Event, dest string, op attribute.KeyValue, opName string) []attribute.KeyValue {
	src := e.Source
	if src == "" {
		src = core.DefaultSource
	}
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		semconv.MessagingSystemKey.String(c.system),
		op,
		semconv.MessagingOperationName(opName),
		semconv.MessagingMessageID(e.ID.String()),
		semconv.CloudEventsEventID(e.ID.String()),
		semconv.CloudEventsEventType(e.Type),
		semconv.CloudEventsEventSource(src),
		semconv.CloudEventsEventSpecVersion(core.SpecVersion),
	)
	if dest != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(dest))
	}
	if e.AggregateID != "" {
		attrs = append(attrs, semconv.CloudEventsEventSubject(e.AggregateID))
	}
	return attrs
}

// spanName follows the semantic conventions' "{operation} {destination}",
// falling back to the operation alone when the destination is unknown.
func spanName(op, dest string) string {
	if dest == "" {
		return op
	}
	return op + " " + dest
}

// creationLink returns a link to the creation context carried by the event,
// unless it is the span the new one runs under anyway because ctx already
// held it (an event without trace context).
//
// When the linked span is also the new span's parent, the link says so with
// opentracing.ref_type=child_of. Jaeger's OTLP translator folds a link to
// the parent into the parent reference and, without that attribute, turns
// the reference into FOLLOWS_FROM, which loses the nesting in its API and UI.
func creationLink(created, ambient trace.SpanContext, isParent bool) []trace.Link {
	if !created.IsValid() || created.Equal(ambient) {
		return nil
	}
	l := trace.Link{SpanContext: created}
	if isParent {
		l.Attributes = []attribute.KeyValue{semconv.OpenTracingRefTypeChildOf}
	}
	return []trace.Link{l}
}

// fail marks span as failed with err.
func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)), ErrorPermanentKey.Bool(core.IsPermanent(err)))
}

// errorType is a low-cardinality class for error.type. An error that names
// its own type (an ErrorType() string method, as the semantic conventions
// suggest: a transport's HTTP status, say) wins; otherwise what matters to an
// operator is whether the error was a timeout and whether it will be
// retried.
func errorType(err error) string {
	var typed interface{ ErrorType() string }
	if errors.As(err, &typed) {
		if s := typed.ErrorType(); s != "" {
			return s
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case core.IsPermanent(err):
		return "permanent"
	default:
		return "transient"
	}
}

// endPanicking ends spans whose work panicked, then lets the panic go on: a
// span never ended is never exported, and the panic is the most interesting
// thing to see.
func endPanicking(v any, spans ...trace.Span) {
	for _, s := range spans {
		if s == nil {
			continue
		}
		s.SetStatus(codes.Error, "panic")
		s.SetAttributes(semconv.ErrorTypeKey.String("panic"))
		s.End()
	}
	panic(v)
}
