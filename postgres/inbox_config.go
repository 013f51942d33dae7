package postgres

import (
	"github.com/outboxkit/outboxkit/core"
)

// DefaultInboxBatchSize is InboxConfig.Relay.BatchSize's default: inbox
// handlers are the slow ones, and a worker's batch is applied one event
// after another within one PublishTimeout.
const DefaultInboxBatchSize = 10

// InboxConfig configures an Inbox. Consumer is required; every other field
// says its default.
type InboxConfig struct {
	// Consumer names the consumer the inbox belongs to: one inbox table per
	// consumer, so an event is deduplicated by its ID alone, and the
	// worker's Deduper records its effects under this name. Required.
	Consumer string

	// Store configures the inbox table, an ordinary outbox table: Schema,
	// Table, Ordering, MaxPayloadBytes, Notify, Wakeup and the rest mean
	// what they mean for an outbox. Table defaults to "<Consumer>_inbox"
	// (so Consumer must then be a valid identifier, at most 34 bytes; name
	// the Table otherwise). Run Migrate with the same Schema and Table
	// first. Set Ordering to apply each aggregate's events in the
	// producer's sequence order (see Inbox). BeforeAdd is ignored: the
	// inbox keeps the producer's trace context.
	Store Config

	// Handler applies an event's effect on the worker side. It runs
	// through Deduper, so its writes belong in the Deduper's transaction
	// (TxFromContext, Effect). Leave it nil in a process that only
	// receives: Run then refuses to start. Defaults to nil.
	Handler core.Handler

	// Deduper applies Handler at most once per (Consumer, event ID): the
	// workers are relays, which deliver at least once. A
	// core.SequencedDeduper here also applies each aggregate's events in
	// order, retrying an event that arrived before its predecessor (see
	// Inbox). Defaults to a Deduper (NewDeduper) on the inbox table's own
	// <Table>_processed, which Migrate creates with the inbox table and
	// outboxctl prune --processed --table <Table> prunes; pass the
	// Deduper your receiver used before the inbox to keep one record.
	Deduper core.Deduper

	// Relay configures the workers: core.RelayConfig's fields and
	// defaults (leases, Retry's backoff and MaxAttempts before the
	// dead letter, Middleware, Hooks such as tracing.RelayHook for the
	// metrics, Logger), except BatchSize, which defaults to
	// DefaultInboxBatchSize (10). A batch's handlers run one after another
	// within PublishTimeout (10 s by default); events a batch did not reach
	// in time are given back unattempted, so keep BatchSize × the
	// handler's duration well inside it.
	Relay core.RelayConfig
}

// maxConsumerTableBytes is the longest Consumer that names a default
// table: "<Consumer>_inbox" within maxTableBytes.
const maxConsumerTableBytes = maxTableBytes - len("_inbox")

// WithDefaults returns a copy of c with zero fields set to their defaults.
// Deduper's default needs the pool, so NewInbox sets it.
func (c InboxConfig) WithDefaults() InboxConfig {
	if c.Store.Table == "" && c.Consumer != "" {
		c.Store.Table = c.Consumer + "_inbox"
	}
	c.Store = c.Store.WithDefaults()
	if c.Relay.BatchSize == 0 {
		c.Relay.BatchSize = DefaultInboxBatchSize
	}
	return c
}

func (c InboxConfig) validate(given InboxConfig) error {
	if c.Consumer == "" {
		return &core.ConfigError{Field: "Consumer", Reason: `is empty: name the consumer (e.g. "billing"); its inbox table defaults to "<Consumer>_inbox"`}
	}
	if given.Store.Table == "" {
		if err := validateIdentifier("consumer name", c.Consumer, maxConsumerTableBytes); err != nil {
			return &core.ConfigError{Field: "Store.Table", Reason: "defaults to \"<Consumer>_inbox\", and " + err.Error() + ": name the inbox table in Store.Table"}
		}
	}
	return nil
}
