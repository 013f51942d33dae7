package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Sequencer implements core.SequencedDeduper on PostgreSQL: besides
// applying each event once, it applies each aggregate's events in order,
// per consumer (see core.SequencedDeduper for the rules).
//
// For a sequenced event it keeps the consumer's last applied sequence of
// the aggregate in <Table>_sequences and advances it in the effect's
// transaction, which it hands to the effect through the context
// (TxFromContext) as Deduper does; that row is also what makes a redelivery
// harmless, so sequenced events write nothing to <Table>_processed. Events
// without an aggregate ID or a sequence go through Once, recorded in
// <Table>_processed exactly as by a Deduper on the same tables.
//
// Concurrent deliveries of one aggregate serialise on its row: an effect
// holds the row lock until its transaction ends. The common case, the next
// event in order, costs what Deduper.Once costs: BEGIN, one statement, the
// effect, COMMIT.
type Sequencer struct {
	*Deduper
	db  conns
	cfg SequencerConfig

	advanceSQL, startSQL, overGapSQL, gapSQL, alertSQL, parkSQL string

	stats struct{ applied, stale, gaps, alerts, parked, overGap atomic.Int64 }
}

var _ core.SequencedDeduper = (*Sequencer)(nil)

// SequencerStats counts a Sequencer's sequenced decisions since it was
// made.
type SequencerStats struct {
	// Applied counts events applied in order; AppliedOverGap those the
	// GapApplyAnyway policy applied past a gap.
	Applied, AppliedOverGap int64
	// Stale counts repeated or older events acknowledged without effect.
	Stale int64
	// Gaps counts deliveries refused because a predecessor was missing;
	// GapAlerts the gaps that lasted past GapAlertAfter (once each); Parked
	// the events GapPark gave up on.
	Gaps, GapAlerts, Parked int64
}

// NewSequencer returns a Sequencer on pool; cfg may be nil for the
// defaults. It performs no I/O: run Migrate for the same schema and table
// first (migration 008 creates its tables).
func NewSequencer[DB Handle](db DB, cfg *SequencerConfig) (*Sequencer, error) {
	h, _, err := openHandle(db, "db")
	if err != nil {
		return nil, err
	}
	var c SequencerConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	n, err := c.validate()
	if err != nil {
		return nil, err
	}
	d, err := newDeduper(h, &DeduperConfig{Schema: c.Schema, Table: c.Table, PruneBatchSize: c.PruneBatchSize})
	if err != nil {
		return nil, err
	}
	key := ` WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3`
	return &Sequencer{
		Deduper: d, db: h, cfg: c,
		// The next event in order: advance the row if it holds the
		// predecessor (waiting for a concurrent holder of the row lock, then
		// rechecking), close the aggregate's gap if one was recorded, and
		// report the last sequence otherwise. The outer read uses the
		// statement's snapshot, so after a wait it may lag behind the row;
		// the caller retries when what it read contradicts the update.
		advanceSQL: `WITH adv AS (
UPDATE ` + n.sequences + ` SET last_sequence = $4, updated_at = now()` + key + ` AND last_sequence = $4 - 1 RETURNING 1
), closed AS (
DELETE FROM ` + n.sequenceGaps + key + ` AND expected <= $4 AND EXISTS (SELECT FROM adv)
)
SELECT EXISTS (SELECT FROM adv), (SELECT last_sequence FROM ` + n.sequences + key + `)`,
		// The first event of an aggregate the consumer has no row for.
		startSQL: `WITH ins AS (
INSERT INTO ` + n.sequences + ` (consumer, aggregate_type, aggregate_id, last_sequence) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1
), closed AS (
DELETE FROM ` + n.sequenceGaps + key + ` AND EXISTS (SELECT FROM ins)
)
SELECT EXISTS (SELECT FROM ins)`,
		// GapApplyAnyway: move the row forward to $4 from wherever it is
		// below it.
		overGapSQL: `WITH adv AS (
INSERT INTO ` + n.sequences + ` AS s (consumer, aggregate_type, aggregate_id, last_sequence) VALUES ($1, $2, $3, $4)
ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE SET last_sequence = EXCLUDED.last_sequence, updated_at = now()
WHERE s.last_sequence < EXCLUDED.last_sequence
RETURNING 1
), closed AS (
DELETE FROM ` + n.sequenceGaps + key + ` AND EXISTS (SELECT FROM adv)
)
SELECT EXISTS (SELECT FROM adv)`,
		// A gap keeps its first sighting while it waits for the same
		// sequence; a gap waiting for another one is new.
		gapSQL: `INSERT INTO ` + n.sequenceGaps + ` AS g (consumer, aggregate_type, aggregate_id, expected, first_seen_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE SET
expected = EXCLUDED.expected,
first_seen_at = CASE WHEN g.expected = EXCLUDED.expected THEN g.first_seen_at ELSE EXCLUDED.first_seen_at END,
alerted_at = CASE WHEN g.expected = EXCLUDED.expected THEN g.alerted_at END
RETURNING first_seen_at, alerted_at IS NOT NULL`,
		alertSQL: `UPDATE ` + n.sequenceGaps + ` SET alerted_at = $5` + key + ` AND expected = $4 AND alerted_at IS NULL`,
		parkSQL: `INSERT INTO ` + n.sequenceParked + ` (consumer, event_id, event_type, aggregate_type, aggregate_id, sequence, expected, payload, waiting_since, parked_at)
VALUES ($1, $4, $5, $2, $3, $6, $7, $8, $9, $10)
ON CONFLICT (consumer, event_id) DO UPDATE SET expected = EXCLUDED.expected, parked_at = EXCLUDED.parked_at`,
	}, nil
}

// Stats returns the Sequencer's counters.
func (s *Sequencer) Stats() SequencerStats {
	return SequencerStats{
		Applied: s.stats.applied.Load(), AppliedOverGap: s.stats.overGap.Load(), Stale: s.stats.stale.Load(),
		Gaps: s.stats.gaps.Load(), GapAlerts: s.stats.alerts.Load(), Parked: s.stats.parked.Load(),
	}
}

// OnceInOrder implements core.SequencedDeduper. It begins a transaction,
// decides by the aggregate's last applied sequence L, runs effect (through
// TxFromContext's transaction) only for the event after L, advances L and
// commits. A stale event returns false, nil. A gap returns an error matching
// core.ErrSequenceGap: with a RetryAfter hint of GapRetryAfter while the gap
// policy waits, Permanent once GapPark has parked the event. A failed effect
// rolls everything back and its error is returned unchanged.
//
// An event that is not sequenced (core.IsSequenced) goes through Once.
func (s *Sequencer) OnceInOrder(ctx context.Context, consumer string, e core.Event, effect func(ctx context.Context) error) (applied bool, err error) {
	if !core.IsSequenced(e) {
		return s.Once(ctx, core.DedupeKey{Consumer: consumer, EventID: e.ID}, effect)
	}
	if err := checkKey(core.DedupeKey{Consumer: consumer, EventID: e.ID}); err != nil {
		return false, err
	}
	inTx := func(fn func(tx pgx.Tx) (bool, error)) (bool, error) {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return false, wrap("sequencer: begin", err)
		}
		ok, err := fn(tx)
		if err != nil || !ok {
			// Rolling back must happen even when ctx is done.
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return false, err
		}
		if err := tx.Commit(ctx); err != nil {
			return false, wrap("sequencer: commit", err)
		}
		return true, nil
	}
	var (
		dec  decision
		gapE *core.SequenceGapError
	)
	applied, err = inTx(func(tx pgx.Tx) (bool, error) {
		var ok bool
		ok, dec, gapE, err = s.inOrder(ctx, tx, consumer, e, effect)
		return ok, err
	})
	if err == nil && gapE != nil {
		// The transaction is over: the gap's records hold no lock of it
		// (the transaction closing a gap takes the aggregate's row, then
		// the gap's) nor a second connection of the pool.
		var action gapAction
		action, dec, err = s.recordGap(ctx, poolRecorder{s.db}, gapE, e, dec)
		if action == gapApply {
			applied, err = inTx(func(tx pgx.Tx) (bool, error) {
				var ok bool
				ok, dec, err = s.overGap(ctx, tx, consumer, e, effect, dec)
				return ok, err
			})
		}
	}
	if err != nil && !errors.Is(err, core.ErrSequenceGap) {
		return false, err
	}
	s.finish(ctx, consumer, e, dec, err)
	return applied, err
}

// OnceInOrderTx is OnceInOrder within a transaction the caller already
// holds. It works in a savepoint of tx, so a stale event, a gap or a failed
// effect rolls back to it and leaves tx usable. The effect receives the
// savepoint through TxFromContext.
//
// Nothing is durable until the caller commits tx: applied reports that the
// effect ran and the new last sequence is written in tx, whose row lock on
// the aggregate is held until tx ends. A gap's first sighting (and a parked
// event) is recorded in a short transaction on the Sequencer's pool
// instead, so it survives a rollback of tx; should tx itself hold that
// record's lock (it closed an earlier gap of the same aggregate), the gap is
// answered without its age after a second.
//
// Under REPEATABLE READ or SERIALIZABLE, a concurrent delivery of the same
// aggregate makes the statement fail with a serialization error: retry the
// transaction.
func (s *Sequencer) OnceInOrderTx(ctx context.Context, tx pgx.Tx, consumer string, e core.Event, effect func(ctx context.Context) error) (applied bool, err error) {
	if tx == nil {
		return false, &core.ConfigError{Field: "tx", Reason: "is nil: pass the transaction to join, or call OnceInOrder"}
	}
	if !core.IsSequenced(e) {
		return s.OnceTx(ctx, tx, core.DedupeKey{Consumer: consumer, EventID: e.ID}, effect)
	}
	if err := checkKey(core.DedupeKey{Consumer: consumer, EventID: e.ID}); err != nil {
		return false, err
	}
	inSavepoint := func(fn func(sp pgx.Tx) (bool, error)) (bool, error) {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return false, wrap("sequencer: savepoint", err)
		}
		ok, err := fn(sp)
		if err != nil || !ok {
			_ = sp.Rollback(context.WithoutCancel(ctx))
			return false, err
		}
		if err := sp.Commit(ctx); err != nil {
			return false, wrap("sequencer: release savepoint", err)
		}
		return true, nil
	}
	var (
		dec  decision
		gapE *core.SequenceGapError
	)
	applied, err = inSavepoint(func(sp pgx.Tx) (bool, error) {
		var ok bool
		ok, dec, gapE, err = s.inOrder(ctx, sp, consumer, e, effect)
		return ok, err
	})
	if err == nil && gapE != nil {
		var action gapAction
		action, dec, err = s.recordGap(ctx, sideTx{s.db}, gapE, e, dec)
		if action == gapApply {
			applied, err = inSavepoint(func(sp pgx.Tx) (bool, error) {
				var ok bool
				ok, dec, err = s.overGap(ctx, sp, consumer, e, effect, dec)
				return ok, err
			})
		}
	}
	if err != nil && !errors.Is(err, core.ErrSequenceGap) {
		return false, err
	}
	s.finish(ctx, consumer, e, dec, err)
	return applied, err
}

// querier is what the gap records need.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// gapRecorder runs the gap's statements: on the pool, one autocommitted
// statement each, or in a transaction of their own (sideTx).
type gapRecorder interface {
	record(ctx context.Context, fn func(q querier) error) error
}

type poolRecorder struct{ db conns }

func (r poolRecorder) record(ctx context.Context, fn func(q querier) error) error { return fn(r.db) }

// sideTx runs the records in a short transaction of their own, beside the
// caller's. Its lock timeout keeps it from waiting on a lock the caller's
// transaction holds.
type sideTx struct{ db conns }

func (r sideTx) record(ctx context.Context, fn func(q querier) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '1s'"); err != nil {
			return err
		}
		return fn(tx)
	})
}

// decision is what a delivery came to, for finish.
type decision struct {
	outcome core.SequenceOutcome
	last    int64
	since   time.Time
}

// inOrder decides e against the aggregate's row in tx and runs effect in
// tx when e is next. It does not commit. For a gap it returns the error to
// record, and runs nothing.
func (s *Sequencer) inOrder(ctx context.Context, tx pgx.Tx, consumer string, e core.Event, effect func(ctx context.Context) error) (bool, decision, *core.SequenceGapError, error) {
	var dec decision
	last, next, err := s.advance(ctx, tx, consumer, e)
	if err != nil {
		return false, dec, nil, err
	}
	dec.last = last
	switch {
	case next:
		dec.outcome = core.SequenceApplied
		if err := effect(context.WithValue(ctx, txKey{}, tx)); err != nil {
			return false, dec, nil, err
		}
		return true, dec, nil, nil
	case e.Sequence <= last:
		dec.outcome = core.SequenceStale
		return false, dec, nil, nil
	}
	dec.outcome = core.SequenceGap
	return false, dec, &core.SequenceGapError{
		Consumer: consumer, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		EventID: e.ID, Expected: last + 1, Got: e.Sequence,
	}, nil
}

// recordGap records gap's first sighting (or reads it), applies the gap
// policy's bookkeeping, and returns what to do: the error to answer with,
// or gapApply.
func (s *Sequencer) recordGap(ctx context.Context, r gapRecorder, gap *core.SequenceGapError, e core.Event, dec decision) (gapAction, decision, error) {
	now := s.cfg.Clock.Now()
	var action gapAction
	err := r.record(ctx, func(q querier) error {
		var alerted bool
		if err := q.QueryRow(ctx, s.gapSQL, gap.Consumer, e.AggregateType, e.AggregateID, gap.Expected, now).Scan(&gap.WaitingSince, &alerted); err != nil {
			return err
		}
		action = s.gapAction(now.Sub(gap.WaitingSince), alerted)
		switch action {
		case gapAlert:
			tag, err := q.Exec(ctx, s.alertSQL, gap.Consumer, e.AggregateType, e.AggregateID, gap.Expected, now)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				action = gapRetry // another delivery alerted first
			}
		case gapPark:
			var payload []byte
			if json.Valid(e.Payload) {
				payload = e.Payload
			}
			_, err := q.Exec(ctx, s.parkSQL, gap.Consumer, e.AggregateType, e.AggregateID,
				pgtype.UUID{Bytes: e.ID, Valid: true}, e.Type, e.Sequence, gap.Expected, payload, gap.WaitingSince, now)
			return err
		}
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" /* lock_not_available */ {
			return gapRetry, dec, wrap("sequencer: record gap", err)
		}
		// The caller's transaction holds the gap's row: answer the gap
		// without its age.
		gap.WaitingSince, action = time.Time{}, gapRetry
	}
	dec.since = gap.WaitingSince
	switch action {
	case gapAlert:
		dec.outcome = core.SequenceGapAlert
	case gapPark:
		dec.outcome = core.SequenceParked
		gap.Parked = true
		return action, dec, core.Permanent(gap)
	case gapApply:
		return action, dec, nil
	}
	return action, dec, core.RetryAfter(gap, s.retryHint(now, gap.WaitingSince))
}

// maxGapRetryAfter bounds the hint a lasting gap grows to (retryHint).
const maxGapRetryAfter = 30 * time.Second

// retryHint is how long a transport should wait before redelivering an
// event held back by a gap first seen at since: GapRetryAfter at first,
// then a quarter of the gap's age, at most maxGapRetryAfter (or
// GapRetryAfter if that is longer). Why it grows: every event behind a
// missing predecessor is redelivered at the hint's pace, and with a
// fixed hint a gap that lasts (a relay publishing out of order under
// load, a predecessor waiting out its own backoff) turns into a storm of
// refused deliveries that slows everything else down; spacing them by
// the gap's age keeps the waste a bounded share and spreads the
// transport's retry budget (QStash's Upstash-Retries) over a horizon
// that grows with it, while a gap of a moment still closes within about
// GapRetryAfter.
func (s *Sequencer) retryHint(now, since time.Time) time.Duration {
	hint := s.cfg.GapRetryAfter
	if since.IsZero() {
		return hint
	}
	if grown := now.Sub(since) / 4; grown > hint {
		hint = min(grown, max(maxGapRetryAfter, s.cfg.GapRetryAfter))
	}
	return hint
}

// overGap applies e past a gap (GapApplyAnyway): it moves the aggregate's
// row to e.Sequence, unless the row got there meanwhile, and runs effect.
func (s *Sequencer) overGap(ctx context.Context, tx pgx.Tx, consumer string, e core.Event, effect func(ctx context.Context) error, dec decision) (bool, decision, error) {
	var moved bool
	if err := tx.QueryRow(ctx, s.overGapSQL, consumer, e.AggregateType, e.AggregateID, e.Sequence).Scan(&moved); err != nil {
		return false, dec, wrap("sequencer: apply over gap", err)
	}
	if !moved {
		dec.outcome = core.SequenceStale // the aggregate got past e meanwhile
		return false, dec, nil
	}
	dec.outcome = core.SequenceAppliedOverGap
	if err := effect(context.WithValue(ctx, txKey{}, tx)); err != nil {
		return false, dec, err
	}
	return true, dec, nil
}

// advance moves the aggregate's row to e.Sequence when it holds its
// predecessor (or starts it, for an aggregate without a row), and otherwise
// reports the last applied sequence.
func (s *Sequencer) advance(ctx context.Context, tx pgx.Tx, consumer string, e core.Event) (last int64, next bool, err error) {
	for range 4 {
		var (
			moved bool
			cur   *int64
		)
		if err := tx.QueryRow(ctx, s.advanceSQL, consumer, e.AggregateType, e.AggregateID, e.Sequence).Scan(&moved, &cur); err != nil {
			return 0, false, wrap("sequencer: advance", err)
		}
		switch {
		case moved:
			return e.Sequence - 1, true, nil
		case cur != nil && *cur+1 == e.Sequence:
			continue // a concurrent delivery moved the row after our snapshot: look again
		case cur != nil:
			return *cur, false, nil
		case e.Sequence != 1 && !s.cfg.StartAtFirstSeen:
			return 0, false, nil
		}
		var started bool
		if err := tx.QueryRow(ctx, s.startSQL, consumer, e.AggregateType, e.AggregateID, e.Sequence).Scan(&started); err != nil {
			return 0, false, wrap("sequencer: start aggregate", err)
		}
		if started {
			return e.Sequence - 1, true, nil
		}
		// A concurrent delivery started the aggregate and committed: look
		// again.
	}
	return 0, false, fmt.Errorf("outboxkit/postgres: sequencer: aggregate %s/%s of consumer %q kept changing under its lock; retry", e.AggregateType, e.AggregateID, consumer)
}

type gapAction int

const (
	gapRetry gapAction = iota
	gapAlert
	gapPark
	gapApply
)

func (s *Sequencer) gapAction(waited time.Duration, alerted bool) gapAction {
	if s.cfg.GapPolicy != GapWait && waited >= s.cfg.GapTimeout && waited > 0 {
		if s.cfg.GapPolicy == GapPark {
			return gapPark
		}
		return gapApply
	}
	if !alerted && waited >= s.cfg.GapAlertAfter && waited > 0 {
		return gapAlert
	}
	return gapRetry
}

// finish counts, logs and hooks a decision that is final (committed, or
// with nothing to commit).
func (s *Sequencer) finish(ctx context.Context, consumer string, e core.Event, dec decision, err error) {
	attrs := func(extra ...slog.Attr) []slog.Attr {
		return append([]slog.Attr{
			slog.String("consumer", consumer), slog.String("event_id", e.ID.String()), slog.String("event_type", e.Type),
			slog.String("aggregate_type", e.AggregateType), slog.String("aggregate_id", e.AggregateID),
			slog.Int64("sequence", e.Sequence),
		}, extra...)
	}
	switch dec.outcome {
	case core.SequenceApplied:
		s.stats.applied.Add(1)
	case core.SequenceStale:
		s.stats.stale.Add(1)
		if s.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "sequencer: stale event acknowledged without effect", attrs(slog.Int64("last_applied", dec.last))...)
		}
	case core.SequenceGap:
		s.stats.gaps.Add(1)
	case core.SequenceGapAlert:
		s.stats.gaps.Add(1)
		s.stats.alerts.Add(1)
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "sequencer: an event waits for its predecessor: is an event lost, or dead-lettered upstream?",
			attrs(slog.Int64("expected", dec.last+1), slog.Time("waiting_since", dec.since), slog.String("policy", s.cfg.GapPolicy.String()))...)
	case core.SequenceParked:
		s.stats.gaps.Add(1)
		s.stats.parked.Add(1)
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "sequencer: parked an event whose predecessor did not arrive in time; the transport dead-letters it",
			attrs(slog.Int64("expected", dec.last+1), slog.Time("waiting_since", dec.since), slog.Any("error", err))...)
	case core.SequenceAppliedOverGap:
		s.stats.overGap.Add(1)
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "sequencer: applied an event over a gap; its skipped predecessors will be stale",
			attrs(slog.Int64("skipped_from", dec.last+1), slog.Int64("skipped_to", e.Sequence-1), slog.Time("waiting_since", dec.since))...)
	}
	if s.cfg.OnDecision != nil {
		s.cfg.OnDecision(ctx, core.SequenceDecision{Outcome: dec.outcome, Consumer: consumer, Event: e, Last: dec.last, WaitingSince: dec.since})
	}
}
