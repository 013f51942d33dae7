package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/logs"
)

// DefaultMaxPayloadBytes is 1 MiB: the message size limit of QStash's
// smallest plan, so that an event the store accepts can be delivered by the
// default transport. Raise it (Config.MaxPayloadBytes) if your transport takes
// more.
const DefaultMaxPayloadBytes = 1 << 20

// Config configures a Store. The zero value is usable: every field says its
// default.
type Config struct {
	// Schema is the PostgreSQL schema holding the outbox tables. Several
	// tenants can share a database with one schema each. It must be a plain
	// identifier (letters, digits, underscores, not starting with a digit, at
	// most 63 bytes); it is quoted, so it is case-sensitive. Defaults to
	// "public".
	Schema string

	// Table is the outbox table's name; the store's other tables are named
	// after it (<Table>_aggregates, <Table>_processed). Same rules as Schema,
	// at most 40 bytes so the derived names fit. Defaults to "outbox_events".
	Table string

	// MaxPayloadBytes refuses events whose payload is larger, before anything
	// is written. Defaults to DefaultMaxPayloadBytes (1 MiB, QStash's smallest
	// plan limit). A negative value means no limit.
	MaxPayloadBytes int

	// Ordering turns on per-aggregate ordering: Add assigns each event with an
	// AggregateID a Sequence within its (AggregateType, AggregateID), and
	// Claim hands out only the head of each aggregate (its lowest pending
	// Sequence), never while an earlier event of that aggregate is leased. A
	// failing head blocks its aggregate only; once dead-lettered it no longer
	// blocks. Events without an AggregateID are unordered. Every writer and
	// every relay of one table must agree on this setting. Defaults to false.
	Ordering bool

	// DeletePublished deletes an event's row as soon as it is settled as
	// published, instead of stamping published_at and keeping it until Prune.
	// Deleting costs the database less than writing a new row version, so
	// relays drain faster; in exchange published events can be neither
	// inspected nor replayed, and Prune has nothing to do. Dead letters are
	// kept either way. Defaults to false.
	DeletePublished bool

	// Notify says how writers wake relays. NotifyNone (the default): Add
	// sends nothing and writers pay nothing; relays wake from their own
	// wake-up (Wakeup) or poll. NotifyInTransaction: Add's statement
	// notifies, delivered by the caller's commit, which serialises
	// concurrent writers' commits (0.30 × at 8 writers). NotifyAfterCommit:
	// Store.Notify or Store.InTx notify after the commit, coalesced, which
	// keeps most of concurrent writers' group commit (0.94 ×). NotifyOff:
	// nothing is sent and Listen does not connect. The notifications reach
	// relays that LISTEN (Wakeup WakeupListen, or WakeupAuto's fallback).
	// Writers and relays of one table may differ. Defaults to NotifyNone.
	Notify NotifyMode

	// Wakeup says how a relay's store learns of new events (Listen).
	// WakeupAuto (the default) streams the table's inserts by logical
	// replication where the server runs with wal_level = logical, the
	// wake-up connection's role has REPLICATION and the publication of
	// migration 7 exists, and otherwise LISTENs, saying once (a warning)
	// why and what to do. WakeupListen only LISTENs; WakeupPoll opens no
	// connection. Writers' stores ignore it. Defaults to WakeupAuto.
	Wakeup WakeupMode

	// WakeupURL is the connection string (URL or key=value) of the wake-up
	// connection, the replication stream or LISTEN, when it must not go
	// where the pool goes: a pool behind PgBouncer in transaction mode
	// cannot hold a LISTEN, and a replication connection cannot pass
	// PgBouncer at all, so point WakeupURL at PostgreSQL itself. The role
	// it connects as needs REPLICATION for the stream. Defaults to the
	// pool's connection settings; when those lead through a pooler that
	// loses LISTEN, Listen warns once and relays poll. A store on a
	// database/sql handle has no connection settings to default to: it
	// wakes only with WakeupURL.
	WakeupURL string

	// NotifyInterval paces NotifyAfterCommit's notifications at one per
	// interval, with bursts of two: Notify calls that arrive faster are
	// covered by one notification sent when its turn comes, so a commit's
	// wake-up follows its Notify by at most about an interval plus a round
	// trip. A shorter interval wakes relays sooner under a steady stream
	// of commits; a longer one costs the database fewer notifying
	// transactions (each takes a transaction ID). Defaults to
	// DefaultNotifyInterval (1 ms). A negative value means no pacing: the
	// next notification is sent as soon as the one in flight returns.
	NotifyInterval time.Duration

	// Channel is the LISTEN/NOTIFY channel. Defaults to "<Schema>.<Table>"
	// (hashed when longer than 63 bytes), so tenants sharing a database do not
	// wake each other's relays.
	Channel string

	// ListenBackoffMax caps the delay between the wake-up connection's
	// reconnection attempts (stream or LISTEN), which starts at 100ms and
	// doubles. Defaults to 10s.
	ListenBackoffMax time.Duration

	// BeforeAdd, when set, is called by Add on a copy of each event before it
	// is validated and written, with Add's context. tracing.NewInjector
	// returns such a function: it records the caller's trace context in the
	// event's headers, configured once instead of at every call. Defaults to
	// nil.
	BeforeAdd func(ctx context.Context, e *core.Event)

	// Logger receives the wake-up connection's reconnection warnings, the
	// one warning saying that the WAL stream is unavailable (and how to
	// enable it), the failures of after-commit notifications
	// (Store.Notify) and the events a claim dead-lettered. Defaults to slog.Default() at warn level.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.Channel == "" {
		c.Channel = defaultChannel(c.Schema, c.Table)
	}
	if c.NotifyInterval == 0 {
		c.NotifyInterval = DefaultNotifyInterval
	}
	if c.ListenBackoffMax == 0 {
		c.ListenBackoffMax = 10 * time.Second
	}
	c.Logger = logs.OrDefault(c.Logger)
	return c
}

func (c Config) validate() (names, error) {
	n, err := newNames(c.Schema, c.Table)
	if err != nil {
		return names{}, err
	}
	if err := validateChannel(c.Channel); err != nil {
		return names{}, err
	}
	if !c.Notify.valid() {
		return names{}, &core.ConfigError{Field: "Notify", Reason: c.Notify.String() + " is not a notify mode: use NotifyNone, NotifyInTransaction, NotifyAfterCommit or NotifyOff"}
	}
	if !c.Wakeup.valid() {
		return names{}, &core.ConfigError{Field: "Wakeup", Reason: c.Wakeup.String() + " is not a wake-up mode: use WakeupAuto, WakeupListen or WakeupPoll"}
	}
	if c.ListenBackoffMax < 0 {
		return names{}, &core.ConfigError{Field: "ListenBackoffMax", Reason: "must not be negative"}
	}
	return n, nil
}

// DeduperConfig configures a Deduper. The zero value is usable.
type DeduperConfig struct {
	// Schema holds the processed-events table. Defaults to "public".
	Schema string
	// Table is the outbox table name the migrations were run with; the
	// processed-events table is <Table>_processed. A consumer database runs
	// the same migrations (the outbox table then stays empty). Defaults to
	// "outbox_events".
	Table string
	// PruneBatchSize bounds each delete statement of Prune. Defaults to 1000.
	PruneBatchSize int
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c DeduperConfig) WithDefaults() DeduperConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.PruneBatchSize == 0 {
		c.PruneBatchSize = defaultPruneBatch
	}
	return c
}

func (c DeduperConfig) validate() (names, error) {
	if c.PruneBatchSize < 1 {
		return names{}, &core.ConfigError{Field: "PruneBatchSize", Reason: "must be at least 1"}
	}
	return newNames(c.Schema, c.Table)
}

// MigrateConfig names what the migrations create. The zero value is usable.
type MigrateConfig struct {
	// Schema to create the tables in; it is created if missing. Defaults to
	// "public".
	Schema string
	// Table is the outbox table's name; the other tables are named after it.
	// Defaults to "outbox_events".
	Table string
	// Partitions chooses the layout of tables the migrations create:
	// PartitionNone, one plain table (the default), or PartitionDaily,
	// PartitionHourly or PartitionMinutes(m) (for short retentions), the
	// outbox table range-partitioned by created_at in periods of that
	// length, with the same columns, so writers are unchanged; Retention
	// then retires whole partitions instead of deleting rows
	// (docs/SCHEMA.md, "The partitioned layout"). The processed table is
	// range-partitioned by event ID by day whatever the outbox table's
	// period: its records are kept for days (RetainProcessed, 30 by
	// default), and hourly or 5-minute partitions would number 720 or
	// 8,640. Tables that exist keep their layout: asking for partitions on
	// an existing plain outbox table fails with a *LayoutError, and
	// ConvertToPartitioned converts it online (and the processed table,
	// unless it holds IDs that are not UUID v7).
	Partitions Partitioning
	// PartitionsAhead is how many periods of the outbox table after the
	// current one the migration creates partitions for, with the
	// partitioned layout. The processed table gets as many days as cover
	// that time, at least DefaultPartitionsAhead(PartitionDaily).
	// Defaults to DefaultPartitionsAhead of each table's period (outbox:
	// 2 days, 4 hours, or 30 minutes' worth of periods of minutes, at
	// least 4; processed: 2 days).
	PartitionsAhead int
	// Logger receives a line per applied or reverted version, at info
	// level. Defaults to slog.Default() at warn level, which leaves those
	// lines out: pass a logger to see them.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c MigrateConfig) WithDefaults() MigrateConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	c.Logger = logs.OrDefault(c.Logger)
	return c
}

// defaultPruneBatch bounds each pruning DELETE so it never holds many row
// locks or produces a long burst of WAL.
const defaultPruneBatch = 1000
