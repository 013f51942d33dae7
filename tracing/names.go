package tracing

import "go.opentelemetry.io/otel/attribute"

// Attribute keys this package adds beside the semantic conventions'
// messaging.* and cloudevents.* attributes. They are exported so dashboards,
// alerts and tests can refer to them without retyping strings.
const (
	// DedupeAppliedKey is set on the consumer span by Deduper: true when the
	// effect ran now, false when the delivery was a duplicate and the effect
	// was skipped. It is absent when the effect failed.
	DedupeAppliedKey = attribute.Key("outboxkit.dedupe.applied")
	// ConsumerKey names the consumer (core.DedupeKey.Consumer) on the
	// consumer span and on the duplicates counter.
	ConsumerKey = attribute.Key("outboxkit.consumer")
	// EventAttemptsKey is the event's claim count (core.Event.Attempts) on
	// the relay's producer span, so a retried publish is visible as such.
	EventAttemptsKey = attribute.Key("outboxkit.event.attempts")
	// ErrorPermanentKey is true on a failed span when the error was marked
	// with core.Permanent: the event is dead-lettered (relay) or the transport
	// is told to stop redelivering (consumer).
	ErrorPermanentKey = attribute.Key("outboxkit.error.permanent")
	// OutcomeKey is the relay's decision for an event on MetricEventsSettled
	// and MetricEventAttempts: "published", "retry", "dead_lettered",
	// "released" or "deferred" (refused because of configuration; the
	// event keeps its attempts).
	OutcomeKey = attribute.Key("outboxkit.outcome")
	// PublishResultKey sums up one Publish call on MetricPublishDuration:
	// "ok" (every event accepted), "partial" or "failed" (none accepted).
	PublishResultKey = attribute.Key("outboxkit.publish.result")
)

// DuplicateEventName is the name of the span event Deduper adds to the
// consumer span when it suppresses a duplicate delivery.
const DuplicateEventName = "duplicate"

// Metric instrument names. Every name is prefixed "outboxkit." and every
// instrument declares its unit.
const (
	// MetricEventsPending (gauge, {event}) is core.Stats.Pending: events
	// neither published nor dead-lettered, in flight included.
	MetricEventsPending = "outboxkit.events.pending"
	// MetricEventsLeased (gauge, {event}) is core.Stats.Leased: pending
	// events under a live lease, i.e. being published now.
	MetricEventsLeased = "outboxkit.events.leased"
	// MetricOldestPendingAge (gauge, s) is core.Stats.OldestPendingAge: how
	// long the oldest pending event has waited; 0 when none is pending. The
	// one number to alert on when a relay is stuck.
	MetricOldestPendingAge = "outboxkit.events.oldest_pending_age"
	// MetricEventsDeadLettered (gauge, {event}) is core.Stats.DeadLettered:
	// dead-lettered events still in the store, waiting for replay or purge.
	MetricEventsDeadLettered = "outboxkit.events.dead_lettered"
	// MetricEventsSettled (counter, {event}) counts the relay's decisions
	// that the store recorded, one per claimed event, by OutcomeKey. One
	// counter rather than one per outcome, so a failure ratio is a single
	// query and a new outcome needs no new instrument. An event whose settle
	// failed is not counted here (it is settled, and counted, when it is
	// published again) but in MetricEventsUnsettled.
	MetricEventsSettled = "outboxkit.events.settled"
	// MetricEventsUnsettled (counter, {event}) counts the relay's decisions
	// that the store did not record, by OutcomeKey and error.type:
	// "lease_lost" (another relay took the event over and settles it) or
	// "store" (the settle failed; the event is published again once its
	// lease expires). Its rate is how much work is being done twice.
	MetricEventsUnsettled = "outboxkit.events.unsettled"
	// MetricEventAttempts (histogram, {attempt}) records how many attempts an
	// event took when it left the outbox (published or dead-lettered, and
	// the store recorded it), by OutcomeKey.
	MetricEventAttempts = "outboxkit.events.attempts"
	// MetricPublishDuration (histogram, s) records how long each Publish call
	// (one batch) took, by PublishResultKey.
	MetricPublishDuration = "outboxkit.publish.duration"
	// MetricSettleErrors (counter, {batch}) counts batches whose Settle
	// failed, by error.type: "lease_lost" (another relay took the events
	// over) or "store". Their events are published again later.
	MetricSettleErrors = "outboxkit.settle.errors"
	// MetricEventsDuplicates (counter, {event}) counts duplicate deliveries
	// suppressed by Deduper, by ConsumerKey.
	MetricEventsDuplicates = "outboxkit.events.duplicates"
)
