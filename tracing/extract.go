package tracing

import (
	"context"

	"github.com/outboxkit/outboxkit/core"
)

// NewExtractor returns a read hook, the consuming side's counterpart of
// NewInjector: given a context and an event, it returns the context carrying
// the trace context and baggage of the event's Headers (whatever the
// configured propagators read), so that spans started from it continue the
// producer's trace. Headers with no trace context leave ctx as it was.
//
// Adapters that hand events to code which starts its own spans take such a
// hook rather than importing this package: the Watermill subscribers'
// ContextFor field, for instance.
//
//	sub, err := outboxwatermill.NewOutboxSubscriber(store, &outboxwatermill.OutboxSubscriberConfig{
//		ContextFor: tracing.NewExtractor(opts...),
//	})
//
// The result is an unnamed function type so it can be assigned to any hook
// field of that shape, whatever the adapter names its type.
func NewExtractor(opts ...Option) func(ctx context.Context, e core.Event) context.Context {
	prop := newConfig(opts).prop
	return func(ctx context.Context, e core.Event) context.Context {
		return prop.Extract(ctx, HeaderCarrier(e.Headers))
	}
}
