package qstash

import (
	"context"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// Outcome is what the Receiver made of a delivery.
type Outcome int

// Outcomes, with the status the Receiver answers.
const (
	// OutcomeApplied: the handler's effect committed now (200).
	OutcomeApplied Outcome = iota + 1
	// OutcomeDuplicate: the Deduper had already recorded the event; the
	// handler did not run (200, so QStash stops redelivering).
	OutcomeDuplicate
	// OutcomePermanent: the handler returned a core.Permanent error (489
	// with Upstash-NonRetryable-Error, so QStash dead-letters at once).
	OutcomePermanent
	// OutcomeTransient: the handler or the Deduper failed, or the handler
	// panicked (500, or 503 with Retry-After; QStash retries).
	OutcomeTransient
	// OutcomeUnauthorized: the signature is missing or invalid (401). Nothing
	// ran.
	OutcomeUnauthorized
	// OutcomeMalformed: not a POST (405) or not a decodable event (400).
	// Nothing ran.
	OutcomeMalformed
	// OutcomeTooLarge: the body exceeds MaxBodyBytes (413). Nothing ran.
	OutcomeTooLarge
)

// String returns a stable snake_case name, suitable as a metric attribute.
func (o Outcome) String() string {
	switch o {
	case OutcomeApplied:
		return "applied"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomePermanent:
		return "permanent_error"
	case OutcomeTransient:
		return "transient_error"
	case OutcomeUnauthorized:
		return "unauthorized"
	case OutcomeMalformed:
		return "malformed"
	case OutcomeTooLarge:
		return "too_large"
	}
	return "unknown"
}

// Decision is what ReceiverConfig.OnDecision learns about each request. It
// is a struct so fields can be added without breaking hooks.
type Decision struct {
	// Outcome classifies the request; Status is the HTTP status answered.
	Outcome Outcome
	Status  int
	// Event is the decoded event; zero when the request was refused before
	// decoding (signature, size, format).
	Event core.Event
	// Delivery carries QStash's message ID and retry count.
	Delivery Delivery
	// Err is why the request failed; nil for OutcomeApplied and
	// OutcomeDuplicate.
	Err error
	// Duration is the time from the request's arrival to the decision,
	// measured with the Receiver's Clock.
	Duration time.Duration
}

// DecisionHook is called once per request, after the effect (if any)
// committed and before the response is written. It runs on the request's
// goroutine, so it must be quick; ctx is the request's.
type DecisionHook func(ctx context.Context, d Decision)
