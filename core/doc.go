// Package core holds outboxkit's vocabulary: the Event, the four contracts
// every adapter implements, the Relay that moves events from a store to a
// transport, and the consumer side that applies each event's effect once.
//
// # The flow
//
// A service writes its business rows and an Event in one database transaction
// (the write method is typed per store: postgres.Store.Add takes the caller's
// pgx transaction). A Relay claims committed events from a Store under a
// lease, publishes them through a Publisher with no database lock held, and
// settles each event's outcome: published, retried later with backoff, or
// dead-lettered. A consumer verifies a delivery and runs a Handler through a
// Deduper, which records the event ID in the same transaction as the effect.
//
// Delivery is at-least-once: a relay can crash after the transport accepted
// an event and before settling it, and the event is then published again.
// Effects are exactly-once only through idempotency (Deduper, ApplyOnce,
// Idempotent). Nothing here promises more.
//
// # The contracts
//
//   - Store: Claim and Settle. Optional capabilities are separate small
//     interfaces found by type assertion: Notifier (wake-ups), StatsReader,
//     Replayer, Pruner, Checker (ready to work: reachable, schema present,
//     migrations current).
//   - Publisher: Publish a batch, reporting per-event outcomes with a
//     BatchError; Permanent marks errors that must not be retried, RetryAfter
//     carries a transport's back-off hint, NotAttempted gives an event back
//     untried, and Misconfigured (ErrMisconfigured) says the configuration,
//     not the event, was refused: such events are deferred with their
//     attempts untouched, so a bad deploy never dead-letters the outbox.
//   - Deduper: Once per (consumer, event ID), atomically with the effect.
//     Optional: SequencedDeduper (OnceInOrder per consumer and aggregate).
//   - Clock: Now and timers, so tests drive time with coretest.FakeClock.
//
// Package coretest holds conformance suites for each contract: a custom
// adapter runs them to prove itself.
//
// # Relay
//
//	relay, err := core.NewRelay(store, publisher, &core.RelayConfig{BatchSize: 100})
//	if err != nil { ... }
//	err = relay.Run(ctx) // until ctx is done, then a graceful shutdown
//
// RelayConfig documents each knob and its default. The relay validates them at
// construction; notably PublishTimeout must be shorter than LeaseDuration.
//
// Run checks the store first when it implements Checker, and returns the
// check's error, saying the relay did not start, rather than run over a
// store that cannot work (the PostgreSQL store reports a missing schema or
// migration this way).
//
// The relay logs through RelayConfig.Logger, by default slog.Default()'s
// handler filtered to warnings and errors: never silent, never chatty. It
// logs one line per failed batch (counts by outcome and the first error),
// not one per event; each failed claim; and, when claims succeed again, one
// warning saying how many failed and for how long.
//
// Shutdown leaves nothing leased: when ctx ends, the relay stops claiming,
// lets publishes in flight finish for up to ShutdownTimeout and settles
// them, and releases at once whatever it cannot publish, including the batch
// of a claim that was in flight (such a batch is released, not published).
// Claims and settles run under a context that shutdown does not cancel,
// bounded by LeaseDuration, because a claim cut short may have committed in
// the database all the same.
//
// # Consumers
//
//	mux := core.NewMux()
//	mux.RegisterFunc("order.confirmed", confirmOrder)
//	h := core.ChainHandler(mux, core.Recover(), core.Idempotent(deduper, "billing"))
//
// A Mux answers an event type it has no handler for with an error matching
// ErrUnknownEventType. In a rolling deploy a producer ships a new type
// before every consumer has its handler, so by default that error is
// transient (the transport redelivers) for DefaultUnknownTypeRetry, an hour,
// after the event's CreatedAt, and permanent (the transport dead-letters)
// after it; an event with no CreatedAt is dead-lettered at once. Options
// change the window (RetryUnknownTypesFor), dead-letter at once
// (DeadLetterUnknownTypes) or never (RetryUnknownTypesForever):
//
//	mux := core.NewMux(core.RetryUnknownTypesFor(6 * time.Hour))
//
// Typed handlers decode the payload as JSON into a Go type; a payload that
// does not decode is a Permanent error naming the event, since redelivering
// the same bytes cannot help (TypedStrict also refuses unknown fields):
//
//	mux.Register("order.paid", core.Typed(func(ctx context.Context, e core.Event, p OrderPaid) error {
//		return markPaid(ctx, p.OrderID)
//	}))
//
// # Consumer-side order
//
// A Deduper that also implements SequencedDeduper (postgres.Sequencer)
// applies each aggregate's events in order, per consumer. ApplyOnce, and so
// Idempotent and qstash.Receiver, uses its OnceInOrder for every event with
// an AggregateID and a positive Sequence (IsSequenced), and Once for the
// others. An event whose sequence was applied already is stale: it is
// acknowledged without effect, like a duplicate. An event ahead of its
// predecessor fails with an error matching ErrSequenceGap (a
// *SequenceGapError naming the consumer, the aggregate, the sequence
// expected and the one received, and since when it waits), marked with
// RetryAfter (DefaultGapRetryAfter, 1 s) so the transport redelivers it
// shortly: qstash.Receiver answers 503 with Retry-After, a Watermill
// subscriber Nacks. What a sequencer does with a gap that lasts is its
// policy; postgres.SequencerConfig documents the choices. Wrappers such as
// tracing.Deduper keep the interface, so ordering survives them.
//
// # Wire format
//
// Transports carry an event as a CloudEvents 1.0 message in binary content
// mode: CloudEventHeaders and EventFromCloudEventHeaders convert both ways.
package core
