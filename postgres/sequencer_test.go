package postgres_test

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/postgres"
)

var seqT0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// seqFixture is a migrated schema with an effects table the handlers write
// to through the sequencer's transaction.
type seqFixture struct {
	db    testDB
	clock *coretest.FakeClock
}

func newSeqFixture(t *testing.T, maxConns int32) seqFixture {
	t.Helper()
	db := newDB(t, maxConns)
	if _, err := db.pool.Exec(ctxT(t), fmt.Sprintf(`CREATE TABLE %q.effects (pos bigserial PRIMARY KEY, consumer text NOT NULL, aggregate_id text NOT NULL, seq bigint NOT NULL)`, db.schema)); err != nil {
		t.Fatal(err)
	}
	return seqFixture{db: db, clock: coretest.NewFakeClock(seqT0)}
}

func (f seqFixture) sequencer(t *testing.T, cfg postgres.SequencerConfig) *postgres.Sequencer {
	t.Helper()
	cfg.Schema = f.db.schema
	if cfg.Clock == nil {
		cfg.Clock = f.clock
	}
	s, err := postgres.NewSequencer(f.db.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// effect writes e's sequence to the effects table through the sequencer's
// transaction.
func (f seqFixture) effect(consumer string, e core.Event) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := postgres.TxFromContext(ctx)
		if !ok {
			return postgres.ErrNoTx
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.effects (consumer, aggregate_id, seq) VALUES ($1, $2, $3)`, f.db.schema), consumer, e.AggregateID, e.Sequence)
		return err
	}
}

// applied returns the sequences applied for an aggregate, in the order their
// effects committed.
func (f seqFixture) applied(t *testing.T, aggregate string) []int64 {
	t.Helper()
	rows, err := f.db.pool.Query(ctxT(t), fmt.Sprintf(`SELECT seq FROM %q.effects WHERE aggregate_id = $1 ORDER BY pos`, f.db.schema), aggregate)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (f seqFixture) countRows(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := f.db.pool.QueryRow(ctxT(t), fmt.Sprintf(`SELECT count(*) FROM %q.%q`, f.db.schema, table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f seqFixture) lastSequence(t *testing.T, consumer, aggregate string) int64 {
	t.Helper()
	var n int64
	err := f.db.pool.QueryRow(ctxT(t), fmt.Sprintf(`SELECT last_sequence FROM %q.outbox_events_sequences WHERE consumer = $1 AND aggregate_type = 'order' AND aggregate_id = $2`, f.db.schema), consumer, aggregate).Scan(&n)
	if err != nil {
		t.Fatalf("last sequence of %s/%s: %v", consumer, aggregate, err)
	}
	return n
}

func seqEvent(t testing.TB, aggregate string, seq int64) core.Event {
	e := mustEvent(t, "order.updated", map[string]int64{"seq": seq})
	e.AggregateType, e.AggregateID, e.Sequence = "order", aggregate, seq
	return e
}

type deliverFunc func(seq int64) (bool, error)

func (f seqFixture) deliverer(t *testing.T, s *postgres.Sequencer, consumer, aggregate string) deliverFunc {
	evs := map[int64]core.Event{}
	return func(seq int64) (bool, error) {
		e, ok := evs[seq]
		if !ok {
			e = seqEvent(t, aggregate, seq)
			evs[seq] = e
		}
		return s.OnceInOrder(ctxT(t), consumer, e, f.effect(consumer, e))
	}
}

func mustApply(t *testing.T, deliver deliverFunc, seq int64, want bool) {
	t.Helper()
	applied, err := deliver(seq)
	if err != nil || applied != want {
		t.Fatalf("deliver %d = %v, %v; want %v, nil", seq, applied, err, want)
	}
}

func mustGap(t *testing.T, deliver deliverFunc, seq, expected int64, since time.Time) *core.SequenceGapError {
	t.Helper()
	applied, err := deliver(seq)
	var gap *core.SequenceGapError
	if applied || !errors.Is(err, core.ErrSequenceGap) || !errors.As(err, &gap) {
		t.Fatalf("deliver %d = %v, %v; want a sequence gap", seq, applied, err)
	}
	if gap.Expected != expected || gap.Got != seq || !gap.WaitingSince.Equal(since) {
		t.Fatalf("gap = %+v; want expected %d, got %d, waiting since %s", gap, expected, seq, since)
	}
	return gap
}

// TestSequencerAppliesInOrder walks every rule: in order, repeat, stale,
// gap (transient, with the default RetryAfter hint), the gap closing.
func TestSequencerAppliesInOrder(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	var outcomes []core.SequenceOutcome
	s := f.sequencer(t, postgres.SequencerConfig{OnDecision: func(_ context.Context, d core.SequenceDecision) { outcomes = append(outcomes, d.Outcome) }})
	deliver := f.deliverer(t, s, "billing", "A")

	mustApply(t, deliver, 1, true)
	mustApply(t, deliver, 1, false) // repeated
	mustApply(t, deliver, 2, true)
	_, err := deliver(4)
	mustGap(t, deliver, 4, 3, seqT0)
	if after, ok := core.RetryAfterHint(err); !ok || after != core.DefaultGapRetryAfter {
		t.Fatalf("gap's RetryAfter hint = %v, %v; want %v", after, ok, core.DefaultGapRetryAfter)
	}
	if core.IsPermanent(err) {
		t.Fatal("a gap is permanent under GapWait")
	}
	if n := f.countRows(t, "outbox_events_sequence_gaps"); n != 1 {
		t.Fatalf("%d gap rows while the gap is open, want 1", n)
	}
	mustApply(t, deliver, 3, true)
	if n := f.countRows(t, "outbox_events_sequence_gaps"); n != 0 {
		t.Fatalf("%d gap rows after the gap closed, want 0", n)
	}
	mustApply(t, deliver, 4, true)
	mustApply(t, deliver, 2, false) // stale
	mustApply(t, deliver, 4, false) // repeated

	if got := f.applied(t, "A"); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("applied %v, want [1 2 3 4]", got)
	}
	if got := f.lastSequence(t, "billing", "A"); got != 4 {
		t.Fatalf("last_sequence = %d, want 4", got)
	}
	if n := f.countRows(t, "outbox_events_processed"); n != 0 {
		t.Fatalf("%d processed rows for sequenced events, want 0 (the sequence row dedupes them)", n)
	}
	want := postgres.SequencerStats{Applied: 4, Stale: 3, Gaps: 2}
	if got := s.Stats(); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
	A, St, G := core.SequenceApplied, core.SequenceStale, core.SequenceGap
	if wantO := []core.SequenceOutcome{A, St, A, G, G, A, A, St, St}; !slices.Equal(outcomes, wantO) {
		t.Fatalf("hook saw %v, want %v", outcomes, wantO)
	}
}

// TestSequencerKeysAreIndependent: consumers and aggregates each keep their
// own order.
func TestSequencerKeysAreIndependent(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	s := f.sequencer(t, postgres.SequencerConfig{})
	mustApply(t, f.deliverer(t, s, "billing", "A"), 1, true)
	mustApply(t, f.deliverer(t, s, "shipping", "A"), 1, true)
	mustApply(t, f.deliverer(t, s, "billing", "B"), 1, true)
	mustGap(t, f.deliverer(t, s, "billing", "C"), 2, 1, seqT0)
}

// TestSequencerFailedEffectKeepsItsPlace: a failing effect advances
// nothing, and the error comes back unchanged.
func TestSequencerFailedEffectKeepsItsPlace(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	s := f.sequencer(t, postgres.SequencerConfig{})
	e := seqEvent(t, "A", 1)
	boom := core.Permanent(errors.New("boom"))
	applied, err := s.OnceInOrder(ctxT(t), "billing", e, func(ctx context.Context) error {
		if err := f.effect("billing", e)(ctx); err != nil {
			return err
		}
		return boom
	})
	if applied || !errors.Is(err, boom) || !core.IsPermanent(err) {
		t.Fatalf("failing effect = %v, %v; want false and the effect's own (permanent) error", applied, err)
	}
	if got := f.applied(t, "A"); len(got) != 0 {
		t.Fatalf("a failed effect's writes committed: %v", got)
	}
	mustApply(t, f.deliverer(t, s, "billing", "A"), 1, true)
}

// TestSequencerGapWaitAlertsOnce: under GapWait a gap stays transient, and
// is logged and counted once after GapAlertAfter.
func TestSequencerGapWaitAlertsOnce(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	var alerts atomic.Int32
	s := f.sequencer(t, postgres.SequencerConfig{GapAlertAfter: time.Minute, OnDecision: func(_ context.Context, d core.SequenceDecision) {
		if d.Outcome == core.SequenceGapAlert {
			alerts.Add(1)
		}
	}})
	deliver := f.deliverer(t, s, "billing", "A")
	mustGap(t, deliver, 2, 1, seqT0)
	f.clock.Advance(59 * time.Second)
	mustGap(t, deliver, 2, 1, seqT0)
	if alerts.Load() != 0 {
		t.Fatal("alerted before GapAlertAfter")
	}
	f.clock.Advance(2 * time.Second)
	mustGap(t, deliver, 3, 1, seqT0) // another event behind the same gap
	f.clock.Advance(time.Hour)
	err := mustGap(t, deliver, 2, 1, seqT0)
	if err.Parked {
		t.Fatal("GapWait parked an event")
	}
	if alerts.Load() != 1 || s.Stats().GapAlerts != 1 {
		t.Fatalf("%d alerts (stats %d), want 1 per gap", alerts.Load(), s.Stats().GapAlerts)
	}
	mustApply(t, deliver, 1, true)
	mustApply(t, deliver, 2, true)
	mustApply(t, deliver, 3, true)
	// A new gap is new: its age starts again, and it alerts again.
	now := f.clock.Now()
	mustGap(t, deliver, 5, 4, now)
	f.clock.Advance(2 * time.Minute)
	mustGap(t, deliver, 5, 4, now)
	if alerts.Load() != 2 {
		t.Fatalf("%d alerts after a second gap, want 2", alerts.Load())
	}
}

// TestSequencerGapHintGrowsWithItsAge: the RetryAfter hint of a gap is
// GapRetryAfter while it is young, a quarter of its age as it lasts, and
// at most 30 s, so the events behind a lasting gap are redelivered ever
// more slowly instead of at a fixed pace.
func TestSequencerGapHintGrowsWithItsAge(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	s := f.sequencer(t, postgres.SequencerConfig{})
	deliver := f.deliverer(t, s, "billing", "A")
	for _, step := range []struct {
		advance, want time.Duration
	}{
		{0, time.Second},
		{3 * time.Second, time.Second},        // 3 s old: a quarter is under 1 s
		{17 * time.Second, 5 * time.Second},   // 20 s old
		{100 * time.Second, 30 * time.Second}, // 2 min old: capped
		{time.Hour, 30 * time.Second},
	} {
		f.clock.Advance(step.advance)
		applied, err := deliver(2)
		if applied || !errors.Is(err, core.ErrSequenceGap) {
			t.Fatalf("deliver 2 = %v, %v; want a sequence gap", applied, err)
		}
		if got, ok := core.RetryAfterHint(err); !ok || got != step.want {
			t.Fatalf("gap %s old: hint %v (%v), want %v", f.clock.Now().Sub(seqT0), got, ok, step.want)
		}
	}
	mustApply(t, deliver, 1, true)
	mustApply(t, deliver, 2, true)
}

// TestSequencerGapParkAfterTimeout: GapPark answers Permanent after
// GapTimeout and keeps the event for operators; once its predecessors
// arrive a replay applies it.
func TestSequencerGapParkAfterTimeout(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	s := f.sequencer(t, postgres.SequencerConfig{GapPolicy: postgres.GapPark, GapTimeout: 5 * time.Minute})
	deliver := f.deliverer(t, s, "billing", "A")
	mustGap(t, deliver, 3, 1, seqT0)
	f.clock.Advance(5*time.Minute - time.Second)
	if _, err := deliver(3); core.IsPermanent(err) {
		t.Fatalf("parked before GapTimeout: %v", err)
	}
	f.clock.Advance(time.Second)
	_, err := deliver(3)
	var gap *core.SequenceGapError
	if !core.IsPermanent(err) || !errors.As(err, &gap) || !gap.Parked || !gap.WaitingSince.Equal(seqT0) {
		t.Fatalf("after GapTimeout = %v; want a permanent, parked sequence gap waiting since %s", err, seqT0)
	}
	if _, ok := core.RetryAfterHint(err); ok {
		t.Fatal("a parked event carries a RetryAfter hint")
	}
	var (
		seq, expected int64
		since         time.Time
	)
	if err := f.db.pool.QueryRow(ctxT(t), fmt.Sprintf(`SELECT sequence, expected, waiting_since FROM %q.outbox_events_sequence_parked WHERE consumer = 'billing' AND aggregate_id = 'A'`, f.db.schema)).Scan(&seq, &expected, &since); err != nil {
		t.Fatalf("parked row: %v", err)
	}
	if seq != 3 || expected != 1 || !since.Equal(seqT0) {
		t.Fatalf("parked row = %d, %d, %s; want 3, 1, %s", seq, expected, since, seqT0)
	}
	if st := s.Stats(); st.Parked != 1 {
		t.Fatalf("stats %+v, want 1 parked", st)
	}
	mustApply(t, deliver, 1, true)
	mustApply(t, deliver, 2, true)
	mustApply(t, deliver, 3, true) // the operator's replay
	if got := f.applied(t, "A"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("applied %v, want [1 2 3]", got)
	}
}

// TestSequencerGapApplyAnywayAfterTimeout: GapApplyAnyway applies the event
// after GapTimeout and its skipped predecessors become stale.
func TestSequencerGapApplyAnywayAfterTimeout(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	s := f.sequencer(t, postgres.SequencerConfig{GapPolicy: postgres.GapApplyAnyway, GapTimeout: time.Minute})
	deliver := f.deliverer(t, s, "billing", "A")
	mustApply(t, deliver, 1, true)
	mustGap(t, deliver, 4, 2, seqT0)
	f.clock.Advance(30 * time.Second)
	mustGap(t, deliver, 4, 2, seqT0)
	f.clock.Advance(30 * time.Second)
	mustApply(t, deliver, 4, true)
	mustApply(t, deliver, 2, false)
	mustApply(t, deliver, 3, false)
	mustApply(t, deliver, 5, true)
	if got := f.applied(t, "A"); !slices.Equal(got, []int64{1, 4, 5}) {
		t.Fatalf("applied %v, want [1 4 5]", got)
	}
	if n := f.countRows(t, "outbox_events_sequence_gaps"); n != 0 {
		t.Fatalf("%d gap rows after applying over the gap, want 0", n)
	}
	if st := s.Stats(); st.AppliedOverGap != 1 || st.Stale != 2 {
		t.Fatalf("stats %+v, want 1 applied over the gap and 2 stale", st)
	}
}

// TestSequencerStartAtFirstSeen: by default an unknown aggregate waits for
// sequence 1; with StartAtFirstSeen its first delivery starts it.
func TestSequencerStartAtFirstSeen(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	mustGap(t, f.deliverer(t, f.sequencer(t, postgres.SequencerConfig{}), "billing", "A"), 5, 1, seqT0)

	s := f.sequencer(t, postgres.SequencerConfig{StartAtFirstSeen: true})
	deliver := f.deliverer(t, s, "late", "A")
	mustApply(t, deliver, 5, true)
	mustApply(t, deliver, 4, false)
	mustApply(t, deliver, 6, true)
	mustGap(t, deliver, 8, 7, seqT0) // only the start is relaxed
	if got := f.applied(t, "A"); !slices.Equal(got, []int64{5, 6}) {
		t.Fatalf("applied %v, want [5 6]", got)
	}
}

// TestSequencerUnsequencedEventsUseProcessed: events without an aggregate
// or a sequence are deduped by event ID, in the processed table.
func TestSequencerUnsequencedEventsUseProcessed(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	s := f.sequencer(t, postgres.SequencerConfig{})
	plain := mustEvent(t, "order.noted", map[string]int{"n": 1})
	noSeq := seqEvent(t, "A", 0)
	var runs int
	h := core.HandlerFunc(func(context.Context, core.Event) error { runs++; return nil })
	for _, e := range []core.Event{plain, noSeq, plain, noSeq} {
		if _, err := core.ApplyOnce(ctxT(t), s, "billing", h, e); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 || f.countRows(t, "outbox_events_processed") != 2 || f.countRows(t, "outbox_events_sequences") != 0 {
		t.Fatalf("ran %d times; want 2, each recorded in the processed table only", runs)
	}
}

// TestSequencerConcurrentShuffledDeliveries: eight goroutines deliver one
// aggregate's 50 events, shuffled, each twice, retrying gaps and failed
// effects: the database shows each applied exactly once, in order.
func TestSequencerConcurrentShuffledDeliveries(t *testing.T) {
	t.Parallel()
	const n, workers = 50, 8
	f := newSeqFixture(t, workers+2)
	s := f.sequencer(t, postgres.SequencerConfig{Clock: core.SystemClock{}})
	evs := make([]core.Event, n)
	for i := range evs {
		evs[i] = seqEvent(t, "A", int64(i+1))
	}
	queue := make(chan core.Event, 2*n)
	for _, i := range rand.Perm(2 * n) {
		queue <- evs[i%n]
	}
	var (
		done, applied, fails atomic.Int32
		wg                   sync.WaitGroup
		errs                 = make(chan error, workers)
	)
	ctx := ctxT(t)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < 2*n {
				var e core.Event
				select {
				case e = <-queue:
				case <-time.After(10 * time.Millisecond):
					continue
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
				ok, err := s.OnceInOrder(ctx, "billing", e, func(ctx context.Context) error {
					if rand.IntN(10) == 0 {
						fails.Add(1)
						return errors.New("transient")
					}
					return f.effect("billing", e)(ctx)
				})
				switch {
				case err == nil:
					if ok {
						applied.Add(1)
					}
					done.Add(1)
				case errors.Is(err, core.ErrSequenceGap) || err.Error() == "transient":
					queue <- e // the transport's retry
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if got := f.applied(t, "A"); !slices.Equal(got, want) {
		t.Fatalf("effects committed in order %v, want 1..%d once each", got, n)
	}
	if applied.Load() != n {
		t.Fatalf("%d deliveries reported applied, want %d", applied.Load(), n)
	}
	if got := f.lastSequence(t, "billing", "A"); got != n {
		t.Fatalf("last_sequence = %d, want %d", got, n)
	}
	t.Logf("%d failed effects retried, stats %+v", fails.Load(), s.Stats())
}

// TestDeduperOnceTxUsesASavepoint: a duplicate or a failed effect leaves the
// caller's transaction usable, and nothing is durable until it commits.
func TestDeduperOnceTxUsesASavepoint(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	ctx := ctxT(t)
	d, err := postgres.NewDeduper(f.db.pool, &postgres.DeduperConfig{Schema: f.db.schema})
	if err != nil {
		t.Fatal(err)
	}
	e := seqEvent(t, "A", 1)
	key := core.DedupeKey{Consumer: "billing", EventID: e.ID}
	write := func(tx pgx.Tx, agg string) {
		t.Helper()
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.effects (consumer, aggregate_id, seq) VALUES ('caller', $1, 0)`, f.db.schema), agg); err != nil {
			t.Fatalf("the caller's transaction is no longer usable: %v", err)
		}
	}

	// Rolled back by the caller: nothing recorded.
	tx, err := f.db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := d.OnceTx(ctx, tx, key, f.effect("billing", e)); !ok || err != nil {
		t.Fatalf("OnceTx = %v, %v", ok, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.countRows(t, "outbox_events_processed"); n != 0 {
		t.Fatalf("%d processed rows after the caller rolled back, want 0", n)
	}

	tx, err = f.db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	write(tx, "before")
	boom := errors.New("boom")
	if ok, err := d.OnceTx(ctx, tx, key, func(ctx context.Context) error {
		if err := f.effect("billing", e)(ctx); err != nil {
			return err
		}
		// A failing statement aborts the savepoint, not the caller's
		// transaction.
		sp, _ := postgres.TxFromContext(ctx)
		if _, err := sp.Exec(ctx, "SELECT 1/0"); err == nil {
			return errors.New("1/0 succeeded")
		}
		return boom
	}); ok || !errors.Is(err, boom) {
		t.Fatalf("OnceTx with a failing effect = %v, %v; want false, boom", ok, err)
	}
	write(tx, "after-failure")
	if ok, err := d.OnceTx(ctx, tx, key, f.effect("billing", e)); !ok || err != nil {
		t.Fatalf("OnceTx after a failure = %v, %v; want true, nil", ok, err)
	}
	if ok, err := d.OnceTx(ctx, tx, key, f.effect("billing", e)); ok || err != nil {
		t.Fatalf("OnceTx of a duplicate = %v, %v; want false, nil", ok, err)
	}
	write(tx, "after-duplicate")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := f.db.pool.Query(ctx, fmt.Sprintf(`SELECT consumer || ':' || aggregate_id FROM %q.effects ORDER BY pos`, f.db.schema))
	if err != nil {
		t.Fatal(err)
	}
	got, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"caller:before", "caller:after-failure", "billing:A", "caller:after-duplicate"}; !slices.Equal(got, want) {
		t.Fatalf("committed %v, want %v", got, want)
	}
	if ok, err := d.Once(ctx, key, f.effect("billing", e)); ok || err != nil {
		t.Fatalf("Once after the caller committed = %v, %v; want a duplicate", ok, err)
	}
}

// TestSequencerOnceInOrderTxUsesASavepoint: stale events, gaps and failed
// effects leave the caller's transaction usable; the gap's first sighting
// survives the caller's rollback.
func TestSequencerOnceInOrderTxUsesASavepoint(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 4)
	ctx := ctxT(t)
	s := f.sequencer(t, postgres.SequencerConfig{})
	ev := map[int64]core.Event{}
	for i := int64(1); i <= 3; i++ {
		ev[i] = seqEvent(t, "A", i)
	}
	tx, err := f.db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	usable := func() {
		t.Helper()
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("the caller's transaction is no longer usable: %v", err)
		}
	}
	if ok, err := s.OnceInOrderTx(ctx, tx, "billing", ev[1], func(context.Context) error { return errors.New("boom") }); ok || err == nil {
		t.Fatalf("failing effect = %v, %v", ok, err)
	}
	usable()
	if ok, err := s.OnceInOrderTx(ctx, tx, "billing", ev[1], f.effect("billing", ev[1])); !ok || err != nil {
		t.Fatalf("seq 1 = %v, %v; want applied", ok, err)
	}
	if ok, err := s.OnceInOrderTx(ctx, tx, "billing", ev[1], f.effect("billing", ev[1])); ok || err != nil {
		t.Fatalf("seq 1 again = %v, %v; want stale", ok, err)
	}
	usable()
	_, err = s.OnceInOrderTx(ctx, tx, "billing", ev[3], f.effect("billing", ev[3]))
	var gap *core.SequenceGapError
	if !errors.As(err, &gap) || gap.Expected != 2 || !gap.WaitingSince.Equal(seqT0) {
		t.Fatalf("seq 3 = %v; want a gap waiting for 2 since %s", err, seqT0)
	}
	usable()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.lastSequence(t, "billing", "A"); got != 1 {
		t.Fatalf("last_sequence = %d after the caller committed, want 1", got)
	}

	// A gap seen in a transaction the caller rolls back keeps its age.
	tx2, err := f.db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	_, err = s.OnceInOrderTx(ctx, tx2, "billing", ev[3], f.effect("billing", ev[3]))
	if !errors.As(err, &gap) || !gap.WaitingSince.Equal(seqT0) {
		t.Fatalf("seq 3 a minute later = %v; want the gap first seen at %s", err, seqT0)
	}
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.countRows(t, "outbox_events_sequence_gaps"); n != 1 {
		t.Fatalf("%d gap rows after the caller rolled back, want 1", n)
	}
	if got := f.applied(t, "A"); !slices.Equal(got, []int64{1}) {
		t.Fatalf("applied %v, want [1]", got)
	}
}

// TestSequencerConformance runs the Deduper and sequenced-deduper suites.
func TestSequencerConformance(t *testing.T) {
	t.Parallel()
	f := newSeqFixture(t, 10)
	newSeq := func(t *testing.T) core.SequencedDeduper {
		s, err := postgres.NewSequencer(f.db.pool, &postgres.SequencerConfig{Schema: migratedSchema(t, f.db.pool)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("Deduper", func(t *testing.T) {
		coretest.TestDeduper(t, func(t *testing.T) core.Deduper { return newSeq(t) })
	})
	t.Run("Sequenced", func(t *testing.T) { coretest.TestSequencedDeduper(t, newSeq) })
}

func TestNewSequencerValidates(t *testing.T) {
	t.Parallel()
	pool := newDB(t, 1).pool
	for _, cfg := range []postgres.SequencerConfig{
		{GapPolicy: 7}, {GapRetryAfter: -1}, {GapAlertAfter: -1}, {GapTimeout: -1}, {Schema: "bad name"}, {PruneBatchSize: -1},
	} {
		if _, err := postgres.NewSequencer(pool, &cfg); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("NewSequencer(%+v) = %v; want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := postgres.NewSequencer((*pgxpool.Pool)(nil), nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("NewSequencer(nil pool) = %v", err)
	}
}
