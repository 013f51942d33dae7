package core

import "context"

// Publisher delivers events to a transport.
//
// Publish returns nil when every event was accepted, a *BatchError when some
// were (its Errs aligned with events), or any other error to fail them all.
// A *BatchError of another length is a bug the relay logs as an error, then
// retries the whole batch (see EventErrors).
// Errors are transient unless marked with Permanent; a transport that knows
// when to come back wraps its error with RetryAfter. Publish must honour ctx:
// the relay cancels it at its PublishTimeout so a lease never expires while a
// publish is still running.
//
// Publish may be called concurrently. It must not keep or modify the events
// after it returns.
type Publisher interface {
	Publish(ctx context.Context, events []Event) error
}

// PublisherFunc adapts a function to a Publisher.
type PublisherFunc func(ctx context.Context, events []Event) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, events []Event) error { return f(ctx, events) }

// PublisherMiddleware wraps a Publisher, as tracing and metrics do.
type PublisherMiddleware func(Publisher) Publisher

// ChainPublisher wraps p in mws; the first middleware is the outermost.
func ChainPublisher(p Publisher, mws ...PublisherMiddleware) Publisher {
	for i := len(mws) - 1; i >= 0; i-- {
		p = mws[i](p)
	}
	return p
}
