package core

import (
	"context"
	"fmt"
	"runtime/debug"
)

// Handler applies an event's effect on the consumer side. Return nil once the
// effect is durable; a Permanent error to tell the transport to stop
// redelivering; any other error to have the event redelivered.
type Handler interface {
	Handle(ctx context.Context, e Event) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, e Event) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, e Event) error { return f(ctx, e) }

// HandlerMiddleware wraps a Handler.
type HandlerMiddleware func(Handler) Handler

// ChainHandler wraps h in mws; the first middleware is the outermost.
func ChainHandler(h Handler, mws ...HandlerMiddleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// ApplyOnce runs h for e through d under the key (consumer, e.ID), so the
// effect is applied at most once however often e is delivered. It reports
// whether the effect ran now (false: it was a duplicate, or it failed).
//
// When d is a SequencedDeduper and e is sequenced (IsSequenced: an
// aggregate ID and a positive Sequence), ApplyOnce calls OnceInOrder
// instead, so the consumer also applies the aggregate's events in order: a
// stale event reports false, nil like a duplicate, and an early one fails
// with an error matching ErrSequenceGap. Other events go through Once, as
// with any Deduper.
func ApplyOnce(ctx context.Context, d Deduper, consumer string, h Handler, e Event) (applied bool, err error) {
	effect := func(ctx context.Context) error { return h.Handle(ctx, e) }
	if sd, ok := d.(SequencedDeduper); ok && IsSequenced(e) {
		return sd.OnceInOrder(ctx, consumer, e, effect)
	}
	return d.Once(ctx, DedupeKey{Consumer: consumer, EventID: e.ID}, effect)
}

// Idempotent returns middleware that runs the wrapped handler through d (see
// ApplyOnce). A duplicate delivery (or, with a SequencedDeduper, a stale
// one) returns nil without calling the handler, so the transport stops
// redelivering it.
func Idempotent(d Deduper, consumer string) HandlerMiddleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, e Event) error {
			_, err := ApplyOnce(ctx, d, consumer, next, e)
			return err
		})
	}
}

// PanicError is the error a Recover middleware returns for a handler that
// panicked. It is transient: the next delivery may succeed.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("outboxkit: handler panicked: %v", e.Value) }

// Recover returns middleware that turns a panicking handler into a
// *PanicError, so one bad event cannot crash the consumer.
func Recover() HandlerMiddleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, e Event) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next.Handle(ctx, e)
		})
	}
}
