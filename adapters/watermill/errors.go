package outboxwatermill

import (
	"errors"

	"github.com/outboxkit/outboxkit/adapters/watermill/internal/lifecycle"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrNonJSONPayload is matched when TxPublisher refuses a message whose
	// payload is not valid JSON. The outbox stores JSON (its payload column is
	// jsonb and every transport delivers it as application/json), so bytes
	// that are not JSON are refused rather than silently re-encoded. The error
	// also matches core.ErrInvalidEvent.
	ErrNonJSONPayload = errors.New("outboxwatermill: message payload is not valid JSON")

	// ErrClosed is returned by a publisher or subscriber used after Close
	// (qstashsub's too), and by a QStash delivery that arrives while (or
	// after) its subscriber closes.
	ErrClosed = lifecycle.ErrClosed

	// ErrNacked is the publish error OutboxSubscriber and the qstashsub
	// subscriber report for a message the consumer Nacked: the event is
	// retried (with the relay's backoff, or by QStash).
	ErrNacked = lifecycle.ErrNacked
)
