package core

import (
	"context"
	"fmt"
)

// HandlerPublisher returns a Publisher whose "transport" is h: Publish
// applies each event of the batch with h, one at a time in batch order, and
// reports every event's outcome in a *BatchError, so a failing event is
// retried (or, with a Permanent error, dead-lettered) alone while the rest
// of its batch settles as published. It is what turns a Relay into an inbox
// worker: an inbox is an outbox whose publisher is the handler, and it gets
// the relay's leases, retries with backoff, dead letters, per-aggregate
// order and hooks unchanged (postgres.Inbox builds it).
//
// The relay delivers at least once, so h must be idempotent: run it
// through a Deduper (Idempotent, ApplyOnce), with its effect in the
// Deduper's transaction.
//
// A panicking h fails its event with a transient *PanicError. Once ctx is
// done (the relay's PublishTimeout, or shutdown), the event running gets
// h's error and the events not yet started are given back with a
// NotAttempted error, so the relay releases them without counting an
// attempt: size RelayConfig.BatchSize so that a batch of slow handlers
// fits in PublishTimeout.
func HandlerPublisher(h Handler) Publisher {
	return handlerPublisher{h: ChainHandler(h, Recover())}
}

type handlerPublisher struct{ h Handler }

func (p handlerPublisher) Publish(ctx context.Context, events []Event) error {
	be := NewBatchError(len(events))
	for i := range events {
		if err := ctx.Err(); err != nil {
			be.Set(i, NotAttempted(fmt.Errorf("event %s not handled: %w", events[i].ID, err)))
			continue
		}
		be.Set(i, p.h.Handle(ctx, events[i]))
	}
	return be.ErrOrNil()
}
