package lifecycle

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
)

// AwaitAck waits for the consumer's answer to msg, which was handed out
// under ctx: nil for an Ack, ErrNacked for a Nack, ctx's error if ctx ends
// first.
//
// Once stopping is closed (the subscription or its subscriber is ending),
// ctx no longer counts: the consumer gets grace more, on clock, to answer,
// after which AwaitAck returns ErrClosed, unless msg's own Context ends
// first (a QStash request gone), whose error it returns. A negative grace
// is none.
func AwaitAck(ctx context.Context, msg *message.Message, stopping <-chan struct{}, grace time.Duration, clock core.Clock) error {
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return ErrNacked
	case <-stopping:
	case <-ctx.Done():
		select {
		case <-stopping:
		default:
			return ctx.Err()
		}
	}
	t := clock.NewTimer(max(grace, 0))
	defer t.Stop()
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return ErrNacked
	case <-msg.Context().Done():
		return msg.Context().Err()
	case <-t.C():
		return ErrClosed
	}
}
