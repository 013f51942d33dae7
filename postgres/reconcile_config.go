package postgres

import (
	"context"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// Reconcile defaults.
const (
	// DefaultReconcileGrace is how long after its publish an event may
	// still be on its way: retried by the transport, queued behind others.
	// QStash's second retry comes about 2.5 minutes after the first
	// failure, its third half an hour later; ten minutes covers a healthy
	// consumer's first retries without waiting for a sick one.
	DefaultReconcileGrace = 10 * time.Minute
	// DefaultReconcilePageSize is how many rows one keyset page reads,
	// and how many IDs one lookup on the other side sends.
	DefaultReconcilePageSize = 5000
	// DefaultReconcileMaxListed is how many events (or records) of each
	// kind a ReconcileReport lists; the counts are always complete.
	DefaultReconcileMaxListed = 1000
)

// ReconcileConfig configures Reconcile. Consumer is required; every other
// field says its default.
type ReconcileConfig struct {
	// Schema and Table name the outbox on the outbox handle. Default to
	// "public" and "outbox_events".
	Schema, Table string

	// ConsumerSchema and ConsumerTable name the outbox table whose
	// <ConsumerTable>_processed (and, for a Sequencer,
	// <ConsumerTable>_sequences) the consumer writes, on the consumer
	// handle: the Deduper's or Sequencer's Schema and Table. Default to
	// Schema and Table.
	ConsumerSchema, ConsumerTable string

	// Consumer is the name the consumer records its events under
	// (core.DedupeKey.Consumer, qstash.ReceiverConfig.Consumer). Required.
	Consumer string

	// Since and Until bound the events checked by their created_at
	// (inclusive, exclusive), and the consumer's records checked for
	// phantoms by their processed_at. A zero Since starts at the oldest
	// event; a zero Until is the moment Reconcile starts (the outbox
	// database's clock).
	Since, Until time.Time

	// Grace is how long after its publish an event may go without a
	// processed record before it counts as missing: younger ones are
	// counted as in flight. Defaults to DefaultReconcileGrace (10
	// minutes); a negative value means no grace at all.
	Grace time.Duration

	// PageSize is how many rows one keyset page reads, and how many IDs
	// one lookup on the other database sends: it bounds the memory
	// Reconcile holds whatever the number of events. Defaults to
	// DefaultReconcilePageSize (5,000).
	PageSize int

	// MaxListed bounds how many events of each kind (missing, dead-lettered)
	// and phantom records the report lists; its counts are complete
	// either way. Defaults to DefaultReconcileMaxListed (1,000); a
	// negative value lists everything, which holds every listed item in
	// memory. OnMissing sees every missing event whatever MaxListed says.
	MaxListed int

	// Transport, when set, is asked what it knows of the missing events
	// (for QStash: its DLQ and logs), and its answer is in each missing
	// event's Transport field. A failing lookup does not fail Reconcile:
	// the report's TransportError says why, and the outbox's and the
	// consumer's facts stand. Defaults to nil: no lookup.
	Transport TransportLog

	// OnMissing, when set, is called with every page's missing events as
	// they are found (after the transport lookup), oldest publish first:
	// all of them, however many MaxListed lets the report list. An error
	// stops Reconcile and is returned. Defaults to nil.
	OnMissing func(ctx context.Context, missing []ReconcileEvent) error
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c ReconcileConfig) WithDefaults() ReconcileConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.ConsumerSchema == "" {
		c.ConsumerSchema = c.Schema
	}
	if c.ConsumerTable == "" {
		c.ConsumerTable = c.Table
	}
	if c.Grace == 0 {
		c.Grace = DefaultReconcileGrace
	} else if c.Grace < 0 {
		c.Grace = 0
	}
	if c.PageSize <= 0 {
		c.PageSize = DefaultReconcilePageSize
	}
	if c.MaxListed == 0 {
		c.MaxListed = DefaultReconcileMaxListed
	}
	return c
}

// validate checks c (with defaults applied) and returns the outbox's and
// the consumer's names.
func (c ReconcileConfig) validate() (outbox, consumer names, err error) {
	if outbox, err = newNames(c.Schema, c.Table); err != nil {
		return names{}, names{}, err
	}
	if consumer, err = newNames(c.ConsumerSchema, c.ConsumerTable); err != nil {
		return names{}, names{}, err
	}
	if c.Consumer == "" {
		return names{}, names{}, &core.ConfigError{Field: "ReconcileConfig.Consumer",
			Reason: "is empty: name the consumer whose records to check (the Consumer its Deduper or Receiver records events under)"}
	}
	if !c.Since.IsZero() && !c.Until.IsZero() && !c.Until.After(c.Since) {
		return names{}, names{}, &core.ConfigError{Field: "ReconcileConfig.Until",
			Reason: "is not after Since: give a window that ends after it starts"}
	}
	return outbox, consumer, nil
}
