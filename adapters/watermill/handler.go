package outboxwatermill

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
)

// Handler returns a Watermill handler that applies h to the event each
// message carries, through d under consumer (core.ApplyOnce), the way
// qstash.Receiver does for QStash deliveries: a duplicate is acknowledged
// without effect, and with a core.SequencedDeduper (postgres.Sequencer) so
// is a stale event, while an event ahead of its predecessor has no effect
// and is returned as an error matching core.ErrSequenceGap.
//
// A returned error Nacks the message, so the subscriber delivers it again:
// a gap closes once its predecessor is applied. Nacked messages come back
// at the subscriber's pace, not the error's core.RetryAfterHint; put the
// router's middleware.Retry in front to space them out, and
// middleware.PoisonQueueWithFilter with core.IsPermanent to set aside the
// messages that can never apply (a payload core.Typed cannot decode, a
// gap the sequencer parked) instead of redelivering them for ever.
//
// A message that does not carry a valid event (EventFromMessage) fails
// with a core.Permanent error.
func Handler(h core.Handler, d core.Deduper, consumer string) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		e, err := EventFromMessage(msg)
		if err != nil {
			return core.Permanent(fmt.Errorf("outboxwatermill: message %s: %w", msg.UUID, err))
		}
		_, err = core.ApplyOnce(msg.Context(), d, consumer, h, e)
		return err
	}
}
