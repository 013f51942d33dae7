package postgres

import (
	"log/slog"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/logs"
)

// GapPolicy says what a Sequencer does with an event whose predecessor has
// not been applied, once waiting has gone on for long.
type GapPolicy int

// Gap policies.
const (
	// GapWait keeps answering a gap as transient (ErrSequenceGap with a
	// RetryAfter hint) however long it lasts, so nothing is applied out of
	// order; after GapAlertAfter it logs one warning per gap and counts it
	// (SequencerStats.GapAlerts). The transport's own retry limit still
	// applies: QStash dead-letters a message after its retries. The default.
	GapWait GapPolicy = iota
	// GapPark waits like GapWait for GapTimeout, then records the event in
	// <Table>_sequence_parked and answers a Permanent error (still matching
	// ErrSequenceGap), so the transport dead-letters it where operators see
	// it; replay it once its predecessors are applied.
	GapPark
	// GapApplyAnyway waits like GapWait for GapTimeout, then applies the
	// event and moves the last applied sequence to it: the predecessors it
	// skipped are stale when they arrive and are acknowledged without
	// effect. For consumers that prefer progress to completeness.
	GapApplyAnyway
)

func (p GapPolicy) String() string {
	switch p {
	case GapWait:
		return "wait"
	case GapPark:
		return "park"
	case GapApplyAnyway:
		return "apply_anyway"
	}
	return "unknown"
}

// Sequencer defaults.
const (
	// DefaultGapAlertAfter is how long a gap lasts before a Sequencer warns
	// about it, by default.
	DefaultGapAlertAfter = time.Minute
	// DefaultGapTimeout is how long GapPark and GapApplyAnyway wait for a
	// missing predecessor, by default.
	DefaultGapTimeout = 10 * time.Minute
)

// SequencerConfig configures a Sequencer. The zero value is usable.
type SequencerConfig struct {
	// Schema holds the consumer tables. Defaults to "public".
	Schema string
	// Table is the outbox table name the migrations were run with; the
	// Sequencer uses <Table>_sequences, <Table>_sequence_gaps and
	// <Table>_sequence_parked (migration 008), and <Table>_processed for
	// events without a sequence. Defaults to "outbox_events".
	Table string
	// PruneBatchSize bounds each delete statement of Prune. Defaults to 1000.
	PruneBatchSize int

	// GapPolicy says what happens once a gap has lasted GapTimeout.
	// Defaults to GapWait (keep asking for redelivery).
	GapPolicy GapPolicy
	// GapRetryAfter is the RetryAfter hint on a new gap's error:
	// qstash.Receiver answers 503 with Retry-After, the relay waits at
	// least this long. As the gap lasts the hint grows to a quarter of its
	// age, at most 30 s, so the events held back by a lasting gap do not
	// flood the consumer with redeliveries. Defaults to
	// core.DefaultGapRetryAfter (1 s).
	GapRetryAfter time.Duration
	// GapAlertAfter is how long a gap lasts before it is logged at warn
	// level, once per gap, and counted in SequencerStats.GapAlerts.
	// Defaults to DefaultGapAlertAfter (1 min).
	GapAlertAfter time.Duration
	// GapTimeout is how long GapPark and GapApplyAnyway wait for a missing
	// predecessor, from the first delivery that found the gap. Unused with
	// GapWait. Defaults to DefaultGapTimeout (10 min); keep it shorter than
	// the transport's retry horizon, or the transport gives up first.
	GapTimeout time.Duration

	// StartAtFirstSeen makes the first event a consumer sees of an
	// aggregate it has no record of the start of that aggregate's order,
	// whatever its sequence: for consumers deployed after their producers,
	// or whose producers pruned the aggregate's early events. The price: if
	// the aggregate's first deliveries arrive out of order, whichever comes
	// first wins, and its predecessors are stale. Defaults to false: an
	// unknown aggregate waits for sequence 1 (a gap otherwise).
	StartAtFirstSeen bool

	// Clock tells the time for gap ages. Defaults to core.SystemClock; tests
	// pass a coretest.FakeClock.
	Clock core.Clock
	// Logger receives stale events (Debug), gap alerts, parked events and
	// events applied over a gap (Warn). Defaults to slog.Default() at Warn
	// and above.
	Logger *slog.Logger
	// OnDecision, when set, learns every sequenced decision (metrics attach
	// here). Defaults to none.
	OnDecision core.SequenceHook
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c SequencerConfig) WithDefaults() SequencerConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.PruneBatchSize == 0 {
		c.PruneBatchSize = defaultPruneBatch
	}
	if c.GapRetryAfter == 0 {
		c.GapRetryAfter = core.DefaultGapRetryAfter
	}
	if c.GapAlertAfter == 0 {
		c.GapAlertAfter = DefaultGapAlertAfter
	}
	if c.GapTimeout == 0 {
		c.GapTimeout = DefaultGapTimeout
	}
	if c.Clock == nil {
		c.Clock = core.SystemClock{}
	}
	c.Logger = logs.OrDefault(c.Logger)
	return c
}

func (c SequencerConfig) validate() (names, error) {
	bad := func(field, reason string) error { return &core.ConfigError{Field: field, Reason: reason} }
	switch {
	case c.GapPolicy < GapWait || c.GapPolicy > GapApplyAnyway:
		return names{}, bad("GapPolicy", "is unknown: use GapWait, GapPark or GapApplyAnyway")
	case c.GapRetryAfter < 0:
		return names{}, bad("GapRetryAfter", "is negative: leave it 0 for the 1 s default")
	case c.GapAlertAfter < 0:
		return names{}, bad("GapAlertAfter", "is negative: leave it 0 for the 1 min default")
	case c.GapTimeout < 0:
		return names{}, bad("GapTimeout", "is negative: leave it 0 for the 10 min default")
	}
	return DeduperConfig{Schema: c.Schema, Table: c.Table, PruneBatchSize: c.PruneBatchSize}.validate()
}
