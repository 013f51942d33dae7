package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultGapRetryAfter is the redelivery hint a sequencer attaches to a
// gap (RetryAfter) unless configured otherwise: the predecessor is usually
// a retry or two behind.
const DefaultGapRetryAfter = time.Second

// ErrSequenceGap is matched by the error a SequencedDeduper returns for an
// event whose predecessor has not been applied yet. Unless the sequencer's
// gap policy parked the event (then it is Permanent), the error carries a
// RetryAfter hint, so transports redeliver it shortly.
var ErrSequenceGap = errors.New("outboxkit: sequence gap")

// SequencedDeduper is a Deduper that also applies an aggregate's events in
// order, per consumer. ApplyOnce (and so Idempotent and qstash.Receiver)
// uses OnceInOrder for every event with an aggregate ID and a positive
// Sequence when the deduper implements this interface, and Once for the
// others.
//
// Per (consumer, AggregateType, AggregateID) the sequencer keeps L, the
// last sequence applied:
//
//   - e.Sequence <= L: stale or repeated. The effect does not run;
//     OnceInOrder returns false, nil, so the transport stops redelivering.
//   - e.Sequence == L+1: the effect runs, and L becomes e.Sequence in the
//     effect's transaction: if the effect fails, L stays.
//   - e.Sequence > L+1: a gap. The effect does not run; OnceInOrder returns
//     an error matching ErrSequenceGap (a *SequenceGapError), transient with
//     a RetryAfter hint until the sequencer's gap policy decides otherwise.
//
// An aggregate the consumer has never seen has L = 0 unless the sequencer
// is configured to start at the first sequence it sees.
type SequencedDeduper interface {
	Deduper
	// OnceInOrder runs effect for e under the rules above and reports
	// whether it ran and committed. Concurrent calls for one aggregate
	// serialise. Like Once, it passes its transaction to effect through
	// ctx.
	OnceInOrder(ctx context.Context, consumer string, e Event, effect func(ctx context.Context) error) (applied bool, err error)
}

// IsSequenced reports whether e takes part in consumer-side ordering: it
// names an aggregate (AggregateID; AggregateType may be empty) and carries a
// positive Sequence, as events written with ordering on do.
func IsSequenced(e Event) bool { return e.AggregateID != "" && e.Sequence > 0 }

// SequenceGapError reports an event that arrived before its predecessor. It
// matches ErrSequenceGap.
type SequenceGapError struct {
	// Consumer is the consumer whose order is kept.
	Consumer string
	// AggregateType and AggregateID name the aggregate.
	AggregateType, AggregateID string
	// EventID is the event that arrived early.
	EventID ID
	// Expected is the sequence the consumer waits for (last applied + 1);
	// Got is the event's.
	Expected, Got int64
	// WaitingSince is when the consumer first saw this gap (zero if it
	// could not be recorded).
	WaitingSince time.Time
	// Parked is true when the gap policy gave up waiting and recorded the
	// event for operators; the error is then Permanent, so the transport
	// dead-letters the event.
	Parked bool
}

func (e *SequenceGapError) Error() string {
	s := fmt.Sprintf("outboxkit: sequence gap for consumer %q, aggregate %s/%s: event %s has sequence %d, waiting for %d",
		e.Consumer, e.AggregateType, e.AggregateID, e.EventID, e.Got, e.Expected)
	if !e.WaitingSince.IsZero() {
		s += " since " + e.WaitingSince.UTC().Format(time.RFC3339)
	}
	if e.Parked {
		s += "; parked: waited too long, replay it once its predecessors are applied"
	}
	return s
}

// Is makes errors.Is(err, ErrSequenceGap) true.
func (e *SequenceGapError) Is(target error) bool { return target == ErrSequenceGap }

// SequenceOutcome is what a sequencer made of one sequenced delivery.
type SequenceOutcome int

// Sequence outcomes.
const (
	// SequenceApplied: the event was next in order; its effect committed.
	SequenceApplied SequenceOutcome = iota + 1
	// SequenceStale: the event's sequence was applied already (a repeat or
	// an older event); acknowledged without effect.
	SequenceStale
	// SequenceGap: a predecessor is missing; the delivery is retried.
	SequenceGap
	// SequenceGapAlert: like SequenceGap, reported once per gap when it has
	// lasted longer than the sequencer's alert threshold.
	SequenceGapAlert
	// SequenceParked: the gap lasted too long; the event was recorded for
	// operators and answered Permanent.
	SequenceParked
	// SequenceAppliedOverGap: the gap lasted too long and the policy applied
	// the event anyway; the skipped predecessors become stale.
	SequenceAppliedOverGap
)

// String returns a stable snake_case name, suitable as a metric attribute.
func (o SequenceOutcome) String() string {
	switch o {
	case SequenceApplied:
		return "applied"
	case SequenceStale:
		return "stale"
	case SequenceGap:
		return "gap"
	case SequenceGapAlert:
		return "gap_alert"
	case SequenceParked:
		return "parked"
	case SequenceAppliedOverGap:
		return "applied_over_gap"
	}
	return "unknown"
}

// SequenceDecision describes one sequenced delivery for a sequencer's hook.
// It is a struct so fields can be added without breaking hooks.
type SequenceDecision struct {
	Outcome  SequenceOutcome
	Consumer string
	Event    Event
	// Last is the last applied sequence the decision was made against.
	Last int64
	// WaitingSince is when the gap was first seen (gap outcomes only).
	WaitingSince time.Time
}

// SequenceHook learns every sequenced decision. It runs on the delivery's
// goroutine after the decision is final, so it must be quick.
type SequenceHook func(ctx context.Context, d SequenceDecision)
