package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/outboxkit/outboxkit/core"
)

// Inject writes the trace context of ctx (whatever the configured propagators
// emit: W3C traceparent and tracestate, baggage) into the Headers of every
// event, so the consumer's span joins the trace of the request that wrote
// them. Call it before handing the events to a store's Add, or configure the
// store with NewInjector once instead.
//
// Headers are copied on write: each event that receives trace context gets a
// new map, so a map shared between events, or still held by the caller, is
// never modified. When ctx carries trace context, it replaces any the events
// already had (a stale tracestate must not outlive its traceparent); when it
// carries none, the events are left as they were.
func Inject(ctx context.Context, events []core.Event, opts ...Option) {
	prop := newConfig(opts).prop
	for i := range events {
		injectInto(ctx, prop, &events[i])
	}
}

// NewInjector returns a write hook that does what Inject does for one event.
// A store configured with such a hook calls it on every event it adds, which
// puts trace context on every event with no per-call code in the service.
// The hook replaces e.Headers with a new map rather than writing into it, so
// a store may call it on the caller's own slice elements without touching
// maps the caller still holds.
//
// The result is an unnamed function type so it can be assigned to any hook
// field of that shape, whatever the store names its type.
func NewInjector(opts ...Option) func(ctx context.Context, e *core.Event) {
	prop := newConfig(opts).prop
	return func(ctx context.Context, e *core.Event) { injectInto(ctx, prop, e) }
}

// injectInto sets e.Headers to a copy carrying ctx's trace context and
// reports whether there was any.
func injectInto(ctx context.Context, prop propagation.TextMapPropagator, e *core.Event) bool {
	fresh := make(HeaderCarrier, 3)
	prop.Inject(ctx, fresh)
	if len(fresh) == 0 {
		return false
	}
	fields := prop.Fields()
	h := make(map[string]string, len(e.Headers)+len(fresh))
	for k, v := range e.Headers {
		if !isField(k, fields) {
			h[k] = v
		}
	}
	for k, v := range fresh {
		h[k] = v
	}
	e.Headers = h
	return true
}

// isField reports whether header k is one the propagators own. Matching
// ignores case so a "Traceparent" that came through HTTP is replaced, not
// kept beside the new "traceparent".
func isField(k string, fields []string) bool {
	for _, f := range fields {
		if strings.EqualFold(k, f) {
			return true
		}
	}
	return false
}
