// Package outboxwatermill bridges outboxkit and Watermill
// (github.com/ThreeDotsLabs/watermill) in both directions.
//
// It is named outboxwatermill, not watermill, because programs using it
// nearly always import Watermill's root package too (watermill.NewUUID,
// watermill.NewSlogLogger), and two packages named watermill would force an
// import alias in every such file.
//
// # Watermill code writing into the outbox
//
// TxPublisher is a message.Publisher that writes into the outbox within the
// caller's transaction, so code that publishes through Watermill becomes
// transactional without changing: make one per transaction, as with
// watermill-sql's publisher.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// ... business writes through tx ...
//		pub, err := outboxwatermill.NewTxPublisher[postgres.DBTX](store, tx, nil)
//		if err != nil {
//			return err
//		}
//		return pub.Publish("orders", msg) // an outbox row, committed with the rest
//	})
//
// The store is any Adder: *postgres.Store is one (its transaction type is
// postgres.DBTX); AdderFunc adapts others, such as memory.Store. Payloads
// must be JSON (see TxPublisherConfig.WrapNonJSON for the alternative).
// Set TxPublisherConfig.BeforeAdd to tracing.NewInjector() to record each
// message's trace context (see Trace context below).
//
// TxPublisher only adds events; committing is the caller's. With the
// PostgreSQL store's defaults the commit needs nothing more: relays learn of
// it from the WAL (or by polling). With postgres.NotifyAfterCommit, for
// relays that LISTEN, begin the transaction with store.InTx instead of
// pgx.BeginFunc (same shape; it notifies after the commit), or call
// store.Notify() once your own Commit has succeeded. Forgetting loses
// nothing: the relays' poll delivers the events, only later.
//
// # The outbox feeding Watermill
//
// Publisher is a core.Publisher over any Watermill publisher (NATS
// JetStream, AMQP, Kafka, GoChannel): a core.Relay running it turns outbox
// events into broker messages, which a Watermill Router consumes as usual.
//
//	bridge, _ := outboxwatermill.NewPublisher(natsPublisher, nil)
//	relay, _ := core.NewRelay(store, bridge, nil)
//	go relay.Run(ctx)
//
// Two subscribers let a Router consume outbox events with no broker:
//
//   - OutboxSubscriber reads straight from the outbox store (PostgreSQL as
//     the broker). Subscribe(ctx, topic) runs a relay dedicated to the events
//     bound for topic; Ack marks an event published, Nack retries it with
//     backoff and, after Retry.MaxAttempts, dead-letters it in the store.
//     Choose it when producer and consumer share the database (a modular
//     monolith, workers beside the service): nothing else to run, and the
//     outbox's stats, dead letters and replay cover the consumer too.
//   - qstashsub.Subscriber, in the qstashsub package beside this one, is
//     the http.Handler of a QStash endpoint: each verified delivery becomes
//     a message; Ack answers 200, Nack 500 so QStash retries. Choose it
//     when events travel through QStash (serverless consumers, another
//     network, no broker port to open). It is a package of its own so that
//     programs using this one import no QStash code.
//
// For long-lived consumers across a network, relay with Publisher to a
// broker and subscribe with that broker's own Watermill subscriber.
//
// # Consuming events in a Watermill router
//
// Handler turns a core.Handler into a Watermill handler that applies each
// message's event once through a core.Deduper, as qstash.Receiver does:
// with a postgres.Sequencer, in each aggregate's sequence order too (an
// early message is Nacked and comes back; a stale one is acknowledged).
//
//	seq, _ := postgres.NewSequencer(pool, &postgres.SequencerConfig{Schema: "shipping"})
//	router.AddNoPublisherHandler("ship", "orders", sub,
//		outboxwatermill.Handler(postgres.Effect(ship), seq, "shipping"))
//
// # Trace context
//
// This package imports neither outboxkit's tracing package nor
// OpenTelemetry: trace context reaches it through hooks of core types,
// which the tracing package fills. The W3C trace headers always travel as
// message metadata (see the table below); to also carry them between a
// message's Context and its event, set one field on each side:
//
//	outboxwatermill.TxPublisherConfig{BeforeAdd: tracing.NewInjector(opts...)}
//	outboxwatermill.OutboxSubscriberConfig{ContextFor: tracing.NewExtractor(opts...)}
//	qstashsub.Config{ContextFor: tracing.NewExtractor(opts...)}
//
// Without opts they use OpenTelemetry's global propagator. Left nil, a
// message's Context carries no trace context and TxPublisher records the
// metadata's as it is.
//
// # Event ↔ message
//
//	event                  message
//	ID                     UUID and metadata ce-id. TxPublisher: the message
//	                       UUID when it is a UUID, else a new v7
//	                       (TxPublisherConfig.EventID); a UUID that is not the
//	                       event ID travels in the HeaderMessageUUID header and
//	                       comes back as the message UUID, ce-id staying the ID
//	Type                   ce-type (TxPublisher: ce-type, else the topic)
//	Destination            the topic (Publisher: Destination, else Type;
//	                       qstashsub: Type; EventFromMessage: the topic a
//	                       Router subscribed to)
//	Source                 ce-source ("outboxkit" when empty)
//	AggregateID            ce-subject
//	AggregateType          ce-aggregatetype
//	SchemaVersion          ce-schemaversion
//	Sequence, CreatedAt    ce-sequence, ce-time (store-assigned: TxPublisher
//	                       ignores them)
//	Payload (JSON)         payload, unchanged
//	Headers traceparent,   the same metadata names; with the hooks above the
//	  tracestate, baggage  subscribers also put the trace context in
//	                       msg.Context(), and TxPublisher takes it from
//	                       msg.Context() when there is one
//	Headers (custom)       metadata of the same name ("ce-x-<name>" when the
//	                       name itself starts with "ce-" or is content-type)
//	—                      ce-specversion "1.0", content-type
//	                       "application/json"
//
// MessageFromEvent and EventFromMessage are the two directions of this
// table. The event ID is the idempotency key of every delivery: consumers
// deduplicate on it, with EventFromMessage handing the event to a
// core.Deduper or core.Handler. Delivery is at-least-once everywhere.
package outboxwatermill
