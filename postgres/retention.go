package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Retention keeps an outbox table small: it deletes published events older
// than RetainPublished and processed-event records older than
// RetainProcessed, oldest first, in batches of BatchSize with a pause
// between batches, every Interval. Pending and dead-lettered events are
// never deleted.
//
// Run one in every relay process: among all the Retentions sharing a table,
// whichever holds the table's lease (a row of <schema>.outboxkit_leases,
// migration 009) prunes, and the others wait. The lease is taken and
// renewed with one statement each, timed by the database's now(), so it
// needs no session (it works through PgBouncer in transaction mode and on
// a *sql.DB) and no agreement between the processes' clocks. The leader
// renews it every third of LeaseDuration and stops pruning before a lease
// it could not renew may have expired; when the leader dies its lease
// expires, and another Retention takes over within LeaseDuration. Deleting
// published rows is idempotent, so the lease is there to keep the load on
// the database to one pruner, not for correctness.
//
// Ages are measured with the database's clock.
type Retention struct {
	cfg   RetentionConfig
	db    conns
	store *Store
	dedup *Deduper
	lease *lease
	log   *slog.Logger
	// parts maintains the partitions of a partitioned table
	// (retention_partitions.go).
	parts *Partitions

	backlogSQL string

	// Between passes, on a partitioned outbox table, the leader vacuums
	// (retention_partitions.go). partitioned is what the last pass found,
	// vacuumAt when the next VACUUM is due (it carries over from one pass
	// to the next), vacuumFailing how many failed in a row. Only the
	// goroutine running Run or RunOnce touches them.
	partitioned   bool
	vacuumAt      time.Time
	vacuumFailing int

	running atomic.Bool

	mu    sync.Mutex
	stats RetentionStats
}

// RetentionResult is what one pass (RunOnce) did.
type RetentionResult struct {
	// Leader is whether this Retention held the lease and ran the pass.
	// When false, nothing was deleted: Holder leads.
	Leader bool
	// Holder is the lease's holder: this Retention's when Leader,
	// otherwise the leader's ("" when nobody holds it).
	Holder string
	// PublishedBefore and ProcessedBefore are the pass's horizons, by the
	// database's clock: rows older than these were due. Zero when that
	// kind is kept forever (or the pass did not run).
	PublishedBefore, ProcessedBefore time.Time
	// PublishedDeleted and ProcessedDeleted count the rows deleted.
	PublishedDeleted, ProcessedDeleted int64
	// Batches counts the DELETE statements that deleted rows.
	Batches int
	// Partitions is what the pass did to the partitions of a partitioned
	// table (retention_partitions.go); zero on the plain layout.
	Partitions PartitionReport
	// PublishedBacklog and ProcessedBacklog are measured after the pass:
	// how far the oldest remaining row is beyond its horizon (0 when none
	// is due). Above zero after a successful pass only when rows were
	// skipped (locked by a replay) or became due during the pass.
	PublishedBacklog, ProcessedBacklog time.Duration
}

// RetentionStats is a snapshot of a Retention for metrics. Counters count
// from NewRetention and only grow.
type RetentionStats struct {
	// Holder is this Retention's name in the lease row.
	Holder string
	// Leader is whether it holds the lease and prunes now.
	Leader bool
	// LeaderSince is when it last became the leader (zero if never).
	LeaderSince time.Time
	// LeaseHolder is the holder the lease row named at the last attempt
	// to take or renew it ("" when nobody held it or no attempt
	// succeeded yet).
	LeaseHolder string

	// PublishedDeleted and ProcessedDeleted count deleted rows, updated
	// after every batch.
	PublishedDeleted, ProcessedDeleted int64
	// PartitionsCreated and PartitionsDropped count the partitions this
	// Retention created and dropped as leader of a partitioned table, and
	// DeadLettersMoved the dead letters it moved out of dropped ones.
	PartitionsCreated, PartitionsDropped, DeadLettersMoved int64
	// Vacuums counts the partitions this Retention vacuumed as leader
	// (RetentionConfig.VacuumInterval), and VacuumedDeadRows the dead rows
	// the statistics counted in them before.
	Vacuums, VacuumedDeadRows int64
	// VacuumTime is how long this Retention's leader spent vacuuming:
	// the VACUUMs and the check for dead rows before them, failed calls
	// included.
	VacuumTime time.Duration
	// Passes counts passes that ran to the end; FailedPasses those that
	// did not (LastError says why).
	Passes, FailedPasses int64
	// LastPassAt is when the last pass ended, failed or not (zero before
	// the first), and LastPassDuration how long it took.
	LastPassAt       time.Time
	LastPassDuration time.Duration
	// LastError is the error of the last pass, nil when it succeeded.
	LastError error

	// PublishedBacklog and ProcessedBacklog are how far the oldest row of
	// each kind was beyond its horizon (age minus the retention), by the
	// database's clock, when BacklogMeasuredAt (this process's clock) the
	// leader last measured it, at the end of each pass. A backlog that
	// grows from pass to pass, or a LastPassAt older than a few Intervals
	// on every process, means retention is falling behind.
	PublishedBacklog, ProcessedBacklog time.Duration
	BacklogMeasuredAt                  time.Time
}

var errRetentionRunning = errors.New("outboxkit/postgres: this Retention is already running: call Run or RunOnce one at a time")

// errLeaseRunOut and errLeaseLost end a leader's term.
var (
	errLeaseRunOut = errors.New("outboxkit/postgres: retention stopped before its unrenewed lease could expire")
	errLeaseLost   = errors.New("outboxkit/postgres: retention lease expired or taken by another holder")
)

// NewRetention returns a Retention for the table in cfg (nil for the
// defaults) on db, a *pgxpool.Pool or a *sql.DB (Handle). It performs no
// I/O: run Migrate for the same schema and table first (Run checks).
// Behind PgBouncer in transaction mode, open the pool with NewPool, as for
// a Store.
func NewRetention[DB Handle](db DB, cfg *RetentionConfig) (*Retention, error) {
	h, _, err := openHandle(db, "db")
	if err != nil {
		return nil, err
	}
	var c RetentionConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	n, err := c.validate()
	if err != nil {
		return nil, err
	}
	// The store and the deduper bring their pruning statements; neither
	// opens a connection (no wake-ups, no notifications).
	store, err := New(db, &Config{Schema: c.Schema, Table: c.Table, Wakeup: WakeupPoll, Notify: NotifyOff, Logger: c.Logger})
	if err != nil {
		return nil, err
	}
	dedup, err := newDeduper(h, &DeduperConfig{Schema: c.Schema, Table: c.Table, PruneBatchSize: c.BatchSize})
	if err != nil {
		return nil, err
	}
	log := c.Logger.With("schema", c.Schema, "table", c.Table, "holder", c.Holder)
	if c.RetainPublished >= 0 && c.RetainProcessed >= 0 && c.RetainProcessed < c.RetainPublished {
		log.Warn("retention keeps processed-event records for less time than published events: replaying an event whose record is gone applies its effect again; make RetainProcessed at least RetainPublished",
			"retain_published", c.RetainPublished, "retain_processed", c.RetainProcessed)
	}
	parts, err := newPartitions(h, &PartitionsConfig{Schema: c.Schema, Table: c.Table, Ahead: c.PartitionsAhead, LockTimeout: c.PartitionLockTimeout, Logger: c.Logger})
	if err != nil {
		return nil, err
	}
	return &Retention{
		cfg: c, db: h, store: store, dedup: dedup, log: log, parts: parts,
		lease: newLease(h, n, c.Table+"/retention", c.Holder, c.LeaseDuration),
		// min() over the partial indexes of migrations 001 and 003: one
		// index probe each.
		// And whether either table is partitioned.
		backlogSQL: `SELECT now(),
    (SELECT min(published_at) FROM ` + n.outbox + ` WHERE published_at IS NOT NULL),
    (SELECT min(processed_at) FROM ` + n.processed + `),
    EXISTS (SELECT FROM pg_class c WHERE c.relkind = 'p' AND c.oid IN (to_regclass(` + quoteLiteral(n.outbox) + `), to_regclass(` + quoteLiteral(n.processed) + `)))`,
		stats: RetentionStats{Holder: c.Holder},
	}, nil
}

// Config returns the Retention's configuration with defaults applied.
func (r *Retention) Config() RetentionConfig { return r.cfg }

// Stats returns a snapshot of the Retention's counters and state, for
// metrics. It does no I/O.
func (r *Retention) Stats() RetentionStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Run prunes while this Retention leads, and campaigns for the lease while
// another does, until ctx is done; then it hands the lease back, so
// another Retention takes over at once, and returns nil. It first checks
// that the schema is migrated (Store.Check) and returns that error instead
// of starting. Failures after the start are logged and retried, not
// returned. Run and RunOnce may be called one at a time.
func (r *Retention) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errRetentionRunning
	}
	defer r.running.Store(false)
	if err := r.store.Check(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("outboxkit/postgres: retention did not start: %w", err)
	}
	failing := 0
	for ctx.Err() == nil {
		t, err := r.acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if failing%10 == 0 {
				r.log.Warn("retention could not take or check its lease; trying again", "error", err, "failures", failing+1)
			}
			failing++
			sleepCtx(ctx, jitter(r.cfg.LeaseDuration/3))
			continue
		}
		if failing > 0 {
			r.log.Info("retention reaches its lease again", "failures", failing)
			failing = 0
		}
		if !t.held {
			sleepCtx(ctx, r.followWait(t))
			continue
		}
		_, _ = r.lead(ctx, t, false)
	}
	return nil
}

// RunOnce runs one pass if this Retention can take the lease, and hands
// the lease back afterwards; otherwise it returns at once with Leader
// false and the leader's name. It is for cron jobs and tests: processes
// that run Run need no RunOnce. Its error is the pass's (or the lease
// statement's); rows deleted before a failure are in the result.
func (r *Retention) RunOnce(ctx context.Context) (RetentionResult, error) {
	if !r.running.CompareAndSwap(false, true) {
		return RetentionResult{}, errRetentionRunning
	}
	defer r.running.Store(false)
	t, err := r.acquire(ctx)
	if err != nil {
		return RetentionResult{}, err
	}
	if !t.held {
		return RetentionResult{Holder: t.holder}, nil
	}
	return r.lead(ctx, t, true)
}

// acquire tries to take the lease, bounded so a stalled connection does
// not keep a follower from trying again, and notes who holds it.
func (r *Retention) acquire(ctx context.Context) (leaseTerm, error) {
	actx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration/2)
	defer cancel()
	t, err := r.lease.acquire(actx)
	if err == nil {
		r.mu.Lock()
		r.stats.LeaseHolder = t.holder
		r.mu.Unlock()
	}
	return t, err
}

// followWait is how long a follower waits before trying again: until the
// leader's lease expires (a dead leader's is not renewed), but at most a
// third of a lease, so a handed-back lease is taken soon too. The jitter
// keeps followers from trying in lockstep.
func (r *Retention) followWait(t leaseTerm) time.Duration {
	return jitter(max(min(t.remaining, r.cfg.LeaseDuration/3), 0))
}

// jitter adds up to 20ms or 5% to d, whichever is more.
func jitter(d time.Duration) time.Duration {
	return d + rand.N(max(d/20, 20*time.Millisecond))
}

// lead runs passes while the lease t holds: one (once) or every Interval
// until ctx is done or the lease is lost. A goroutine renews the lease
// every third of LeaseDuration; a watchdog ends the term, cancelling the
// statement in flight, when no renewal succeeded in time.
func (r *Retention) lead(ctx context.Context, t leaseTerm, once bool) (RetentionResult, error) {
	term, stop := context.WithCancelCause(ctx)
	dog := time.AfterFunc(time.Until(t.safeUntil), func() { stop(errLeaseRunOut) })
	since := time.Now()
	r.mu.Lock()
	r.stats.Leader, r.stats.LeaderSince, r.stats.LeaseHolder = true, since, r.cfg.Holder
	r.mu.Unlock()
	// Stats say "not leader" as soon as pruning is cancelled, not once the
	// goroutines are gone.
	unled := make(chan struct{})
	unlead := context.AfterFunc(term, func() {
		defer close(unled)
		r.setLeader(false)
	})
	if !once {
		r.log.Info("retention leads: this process prunes the table", "lease", r.cfg.LeaseDuration)
	}
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		r.keep(term, stop, dog)
	}()

	var (
		res RetentionResult
		err error
	)
	for {
		res, err = r.pass(term)
		if term.Err() != nil || once {
			break
		}
		r.vacuumUntil(term, time.Now().Add(r.cfg.Interval))
		if term.Err() != nil {
			break
		}
	}
	cause := context.Cause(term)
	if unlead() {
		r.setLeader(false)
	} else {
		<-unled // the term ended first: wait, so it cannot outlive this term
	}
	stop(nil)
	dog.Stop()
	<-kept
	switch {
	case errors.Is(cause, errLeaseRunOut) || errors.Is(cause, errLeaseLost):
		r.log.Warn("retention stopped leading", "reason", cause)
		if err == nil || errors.Is(err, context.Canceled) {
			err = cause
		}
	case once || ctx.Err() != nil:
		// Hand the lease back, even though ctx is done, briefly.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(5*time.Second, r.cfg.LeaseDuration/2))
		if rerr := r.lease.release(rctx); rerr != nil {
			r.log.Warn("retention could not hand its lease back; another process takes over when it expires", "error", rerr)
		}
		cancel()
		if !once {
			r.log.Info("retention stopped leading: shutting down")
		}
	}
	if ctx.Err() != nil && !once {
		err = nil
	}
	return res, err
}

// keep renews the lease every third of LeaseDuration until term ends. A
// failed renewal is retried every twentieth; the watchdog ends the term if
// none succeeds before the lease could expire. A lease found expired or
// held by another ends the term at once.
func (r *Retention) keep(term context.Context, stop context.CancelCauseFunc, dog *time.Timer) {
	every, retry := r.cfg.LeaseDuration/3, r.cfg.LeaseDuration/20
	tick := time.NewTimer(every)
	defer tick.Stop()
	for {
		select {
		case <-term.Done():
			return
		case <-tick.C:
		}
		t, err := r.lease.renew(term)
		switch {
		case term.Err() != nil:
			return
		case err != nil:
			r.log.Warn("retention could not renew its lease; it stops pruning before the lease could expire unless a renewal succeeds", "error", err)
			tick.Reset(retry)
		case !t.held:
			stop(errLeaseLost)
			return
		default:
			if !dog.Reset(time.Until(t.safeUntil)) {
				// The watchdog fired already: the term is over.
				return
			}
			tick.Reset(every)
		}
	}
}

// pass deletes what is due, batch by batch, and measures what is left.
func (r *Retention) pass(ctx context.Context) (res RetentionResult, err error) {
	res.Leader, res.Holder = true, r.cfg.Holder
	start := time.Now()
	defer func() {
		if err != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			// Cut short by a shutdown (Run's or RunOnce's context), not
			// failed: what it deleted is counted, nothing else.
			return
		}
		end := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stats.LastPassAt, r.stats.LastPassDuration, r.stats.LastError = end, end.Sub(start), err
		if err != nil {
			r.stats.FailedPasses++
			return
		}
		r.stats.Passes++
		r.stats.PublishedBacklog, r.stats.ProcessedBacklog, r.stats.BacklogMeasuredAt = res.PublishedBacklog, res.ProcessedBacklog, end
	}()

	now, _, _, partitioned, err := r.backlog(ctx)
	if err != nil {
		return res, err
	}
	if !partitioned {
		r.partitioned = false
	}
	if r.cfg.RetainPublished >= 0 {
		res.PublishedBefore = now.Add(-r.cfg.RetainPublished)
	}
	if r.cfg.RetainProcessed >= 0 {
		res.ProcessedBefore = now.Add(-r.cfg.RetainProcessed)
	}
	if partitioned {
		// Partitions first: what they drop need not be deleted.
		if res.Partitions, err = r.maintain(ctx, res); err != nil {
			return res, err
		}
		r.partitioned = res.Partitions.Outbox != PartitionNone
	}
	batch := r.cfg.BatchSize
	switch {
	case r.cfg.RetainPublished >= 0 && res.Partitions.Outbox != PartitionNone:
		for _, part := range res.Partitions.Prune {
			if err := r.pruneRows(ctx, partitionPruneSQL(part), res.PublishedBefore, false, &res); err != nil {
				return res, fmt.Errorf("outboxkit/postgres: retention: %w", wrap("prune partition "+part, err))
			}
		}
	case r.cfg.RetainPublished >= 0:
		var last int64
		res.PublishedDeleted, err = r.store.Prune(ctx, core.PruneRequest{
			PublishedBefore: res.PublishedBefore,
			BatchSize:       batch,
			Progress: func(total int64) {
				n := total - last
				last = total
				res.Batches++
				r.count(n, 0)
				if n >= int64(batch) {
					r.pause(ctx)
				}
			},
		})
		if err != nil {
			return res, fmt.Errorf("outboxkit/postgres: retention: %w", err)
		}
	}
	switch {
	case r.cfg.RetainProcessed >= 0 && res.Partitions.Processed != PartitionNone:
		for _, part := range res.Partitions.PruneProcessed {
			if err := r.pruneRows(ctx, partitionPruneProcessedSQL(part), res.ProcessedBefore, true, &res); err != nil {
				return res, fmt.Errorf("outboxkit/postgres: retention: %w", wrap("prune partition "+part, err))
			}
		}
	case r.cfg.RetainProcessed >= 0:
		for {
			// The Deduper's own bounded statement (Deduper.Prune runs it
			// in a loop with no pause).
			tag, err := r.dedup.db.Exec(ctx, r.dedup.pruneSQL, res.ProcessedBefore, batch)
			if err != nil {
				return res, fmt.Errorf("outboxkit/postgres: retention: %w", wrap("prune processed records", err))
			}
			n := tag.RowsAffected()
			res.ProcessedDeleted += n
			if n > 0 {
				res.Batches++
				r.count(0, n)
			}
			if n < int64(batch) {
				break
			}
			r.pause(ctx)
		}
	}
	now, published, processed, _, err := r.backlog(ctx)
	if err != nil {
		return res, err
	}
	if r.cfg.RetainPublished >= 0 && published.Valid {
		res.PublishedBacklog = max(now.Add(-r.cfg.RetainPublished).Sub(published.Time), 0)
	}
	if r.cfg.RetainProcessed >= 0 && processed.Valid {
		res.ProcessedBacklog = max(now.Add(-r.cfg.RetainProcessed).Sub(processed.Time), 0)
	}
	if res.PublishedDeleted+res.ProcessedDeleted > 0 || len(res.Partitions.Dropped) > 0 {
		r.log.Info("retention pass", "published_deleted", res.PublishedDeleted, "processed_deleted", res.ProcessedDeleted,
			"batches", res.Batches, "partitions_dropped", len(res.Partitions.Dropped), "took", time.Since(start))
	}
	return res, nil
}

// backlog reads the database's now, the oldest published and processed
// times, and whether either table is partitioned.
func (r *Retention) backlog(ctx context.Context) (now time.Time, published, processed pgtype.Timestamptz, partitioned bool, err error) {
	err = r.db.QueryRow(ctx, r.backlogSQL).Scan(&now, &published, &processed, &partitioned)
	if err != nil {
		err = fmt.Errorf("outboxkit/postgres: retention: %w", wrap("read the oldest rows", err))
	}
	return now, published, processed, partitioned, err
}

func (r *Retention) setLeader(v bool) {
	r.mu.Lock()
	r.stats.Leader = v
	r.mu.Unlock()
}

func (r *Retention) count(published, processed int64) {
	r.mu.Lock()
	r.stats.PublishedDeleted += published
	r.stats.ProcessedDeleted += processed
	r.mu.Unlock()
}

// pause waits BatchPause between batches; a cancelled ctx ends it, and
// the next statement then fails with ctx's error.
func (r *Retention) pause(ctx context.Context) {
	if r.cfg.BatchPause > 0 {
		sleepCtx(ctx, r.cfg.BatchPause)
	}
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
