// Package outboxwatermill bridges outboxkit and Watermill
// (github.com/ThreeDotsLabs/watermill), in both directions.
//
// The package is named outboxwatermill, not watermill, because programs that
// use it nearly always import Watermill's root package too (watermill.NewUUID,
// watermill.NewSlogLogger), and two packages named watermill would force an
// alias on every such file.
//
// # Watermill code writing into the outbox
//
// TxPublisher is a message.Publisher that writes into the outbox within the
// caller's transaction, so code that publishes through Watermill becomes
// transactional without changing: make one per transaction, as with
// watermill-sql.
//
//	tx, _ := pool.Begin(ctx)
//	pub, _ := outboxwatermill.NewTxPublisher[postgres.DBTX](store, tx, nil)
//	_ = pub.Publish("orders", msg) // a row in the outbox, not yet a message
//	_ = tx.Commit(ctx)             // now the relay will deliver it
//
// The store is any Adder: *postgres.Store is one (its transaction type is
// postgres.DBTX); AdderFunc adapts others, such as memory.Store.
//
// # The outbox feeding Watermill
//
// Publisher is a core.Publisher over any Watermill publisher (NATS
// JetStream, AMQP, Kafka, GoChannel): run a core.Relay with it and outbox
// events become Watermill messages on a broker, consumed by a Watermill
// Router as usual.
//
//	pub, _ := outboxwatermill.NewPublisher(natsPublisher, nil)
//	relay, _ := core.NewRelay(store, pub, nil)
//	go relay.Run(ctx)
//
// Two subscribers let a Router consume outbox events without a broker:
//
//   - OutboxSubscriber reads straight from the outbox store, PostgreSQL as
//     the broker: Subscribe(ctx, topic) runs a relay dedicated to the events
//     bound for topic, hands them out one at a time and settles each on Ack
//     (published) or Nack (retried with backoff, dead-lettered after
//     MaxAttempts). Choose it when producer and consumer share the database
//     (a modular monolith, a worker pool beside the service): no extra
//     infrastructure, and the outbox's retries, dead letters and replay apply
//     to the consumer too.
//   - QStashSubscriber is an http.Handler for QStash deliveries: each
//     verified delivery becomes a message, and Ack answers 200 while Nack
//     answers 500 so QStash retries. Choose it when events travel through
//     QStash (serverless consumers, other networks, no open broker port).
//
// To cross a network to long-lived consumers, relay with Publisher to a
// broker and subscribe with that broker's own Watermill subscriber.
//
// # Event ↔ message
//
//	event                 message (MessageFromEvent / TxPublisher)
//	ID                    UUID (TxPublisher: message UUID when it is a UUID,
//	                      else a new v7; see TxPublisherConfig.EventID),
//	                      and metadata ce-id
//	Type                  metadata ce-type (TxPublisher: ce-type, else the topic)
//	Destination           the topic (Publisher: Destination, else Type)
//	Source                metadata ce-source ("outboxkit" when empty)
//	AggregateID           metadata ce-subject
//	AggregateType         metadata ce-aggregatetype
//	SchemaVersion         metadata ce-schemaversion
//	Sequence              metadata ce-sequence (store-assigned; not written back)
//	CreatedAt             metadata ce-time (store-assigned; not written back)
//	Payload (JSON)        payload, unchanged (non-JSON refused, or wrapped
//	                      with TxPublisherConfig.WrapNonJSON)
//	Headers traceparent,  metadata traceparent, tracestate, baggage; the
//	tracestate, baggage   subscribers also put them in msg.Context()
//	Headers (custom)      metadata under the same name (under "ce-x-<name>"
//	                      when the name itself starts with "ce-")
//	—                     metadata ce-specversion "1.0", content-type
//	                      "application/json"
//
// The message UUID is the event ID, the idempotency key of every delivery:
// a consumer deduplicates on it (EventFromMessage rebuilds the event for a
// core.Deduper or core.Handler). Delivery is at-least-once in every
// direction.
package outboxwatermill
