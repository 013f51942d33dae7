// Package outboxkafka relays outbox events to Apache Kafka (or any broker
// speaking its protocol: Redpanda, WarpStream, MSK) through franz-go's kgo
// client.
//
// It is named outboxkafka, not kafka, so that it reads apart from the
// client packages a program also imports (kgo, kadm).
//
//	client, err := outboxkafka.NewClient([]string{"kafka-1:9092", "kafka-2:9092"})
//	if err != nil { ... }
//	defer client.Close() // after the relay has stopped
//	pub, err := outboxkafka.NewPublisher(client, nil)
//	relay, err := core.NewRelay(store, pub, nil)
//	go relay.Run(ctx)
//
// # Delivery
//
// Each event becomes one record, produced with the idempotent producer
// (kgo's default, which also means acks from every in-sync replica): a
// produce request the client retries after a lost answer is written once
// by the broker. Publish waits for every record's produce result and
// reports each event's outcome on its own (a *core.BatchError aligned with
// the batch), so a batch split across partitions whose leaders answer
// differently settles exactly what Kafka has.
//
// Delivery is at-least-once, as everywhere in outboxkit: a relay that dies
// between Kafka's acknowledgement and its settle publishes the event
// again once its lease expires, as a new record, which the broker does
// not deduplicate (its idempotence covers one producer session's
// retries, not a second produce of the same event). Consumers deduplicate
// on the event ID (the ce_id header); outboxkit's core.Deduper does that
// in the effect's transaction.
//
// A record handed to a broker cannot be recalled: when Publish's context
// ends first (the relay's PublishTimeout), the events whose results have
// not come back are reported failed and retried later, and a record still
// in flight may yet be written. That is one more duplicate, never a loss.
//
// # Keys, partitions and order
//
// The record key is the event's aggregate ID, else its event ID
// (DefaultKey). kgo's default partitioner hashes keys as Kafka's Java
// client does (murmur2), so an aggregate's events share one partition and
// consumers see them in the order they were produced; with the store's
// per-aggregate ordering on (postgres.Config.Ordering) the relay produces
// an aggregate's events one at a time in sequence order, so that is
// sequence order too. Events without an aggregate are spread over the
// partitions by their IDs.
//
// # Topics
//
// The topic is the event's Destination, else its type (DefaultTopic), as
// for the Watermill transports; PublisherConfig.Topic replaces that (with
// routes from a file, say). An event whose topic is not a valid Kafka topic
// name is dead-lettered when the name came from its own Destination, and
// deferred as a misconfiguration otherwise (core.ErrMisconfigured: it stays
// pending, its attempts untouched, while an operator fixes the routes).
// Topics are not created by the publisher: create them with the
// partitions and replication you want, or enable the broker's automatic
// topic creation.
//
// # Event ↔ record
//
// The record's headers are the CloudEvents binary-mode attributes of
// core.CloudEventHeaders with the "ce-" prefix written "ce_", as the
// CloudEvents Kafka protocol binding names them, so CloudEvents SDKs read
// the records as events:
//
//	event                  record
//	ID                     header ce_id
//	Type                   header ce_type
//	Source                 header ce_source ("outboxkit" when empty)
//	AggregateID            header ce_subject, and the key
//	AggregateType          header ce_aggregatetype
//	SchemaVersion          header ce_schemaversion
//	Sequence               header ce_sequence (when assigned)
//	CreatedAt              header ce_time (the record's timestamp is the
//	                       produce time, so broker retention counts from it)
//	Payload (JSON)         value, unchanged; header content-type
//	                       "application/json"
//	Headers traceparent,   headers of the same W3C names, so tracing works
//	  tracestate, baggage  with consumers that know nothing of outboxkit
//	Headers (custom)       header ce_x-<name>
//	Destination            the topic (DefaultTopic)
//	—                      header ce_specversion "1.0"
//
// RecordFromEvent and EventFromRecord are the two directions of this table.
package outboxkafka
