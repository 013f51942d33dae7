package postgres

import (
	"context"
	"fmt"
	"time"
)

// Retention on the partitioned layout (partition.go). A pass of the
// leader first maintains the partitions: it creates the partitions of the
// current and next periods, then drops every partition whose period ended
// before the pass's horizon and that holds nothing to keep (no pending or
// leased event, nothing published, no record processed, after the
// horizon), moving its dead letters to the default partition, with their
// IDs, before it goes (Partitions.Maintain). A dropped partition costs
// the same whatever it held and leaves no dead rows behind. Then it
// deletes, in batches as on the plain layout, the retired rows of the
// partitions it cannot drop: the default one, and those due but still
// holding rows to keep. Rows are so kept between the retention and the
// retention plus one period.
//
// Between passes the leader of a partitioned outbox table vacuums, every
// VacuumInterval, the partitions whose dead rows call for it
// (Partitions.Vacuum, partition_vacuum.go): the settlements' dead rows,
// which no drop removes, in the partition the claims read.

// maintain runs the pass's partition maintenance and counts it.
func (r *Retention) maintain(ctx context.Context, res RetentionResult) (PartitionReport, error) {
	req := PartitionMaintenance{PublishedBefore: res.PublishedBefore, ProcessedBefore: res.ProcessedBefore}
	rep, err := r.parts.Maintain(ctx, req)
	if err != nil {
		return rep, fmt.Errorf("outboxkit/postgres: retention: %w", err)
	}
	r.mu.Lock()
	r.stats.PartitionsCreated += int64(len(rep.Created))
	r.stats.PartitionsDropped += int64(len(rep.Dropped))
	r.stats.DeadLettersMoved += rep.DeadLettersMoved
	r.mu.Unlock()
	if rep.Failed > 0 {
		r.log.Warn("retention could not change some partitions; it tries again at the next pass", "failed", rep.Failed, "error", rep.Err)
	}
	return rep, nil
}

// pruneRows deletes rows with stmt (bounded by BatchSize, $1 the horizon,
// $2 the batch) until a batch comes back short, counting them as
// published or processed, pausing after each full batch.
func (r *Retention) pruneRows(ctx context.Context, stmt string, before time.Time, processed bool, res *RetentionResult) error {
	batch := r.cfg.BatchSize
	for {
		tag, err := r.db.Exec(ctx, stmt, before, batch)
		if err != nil {
			return err
		}
		n := tag.RowsAffected()
		if n > 0 {
			res.Batches++
			if processed {
				res.ProcessedDeleted += n
				r.count(0, n)
			} else {
				res.PublishedDeleted += n
				r.count(n, 0)
			}
		}
		if n < int64(batch) {
			return nil
		}
		r.pause(ctx)
	}
}

// vacuumUntil waits until next, the start of the next pass, vacuuming the
// outbox table's partitions each time a VACUUM is due on the way, while
// the last pass found the table partitioned and VacuumInterval is
// positive. The due time carries over between passes, so an Interval
// longer or shorter than VacuumInterval changes neither's rhythm.
func (r *Retention) vacuumUntil(ctx context.Context, next time.Time) {
	for ctx.Err() == nil {
		if !r.partitioned || r.cfg.VacuumInterval < 0 {
			sleepCtx(ctx, time.Until(next))
			return
		}
		if r.vacuumAt.IsZero() {
			// The first pass just ended: the first VACUUM is one
			// interval away, leaving the pass's own work to settle.
			r.vacuumAt = time.Now().Add(r.cfg.VacuumInterval)
		}
		if !r.vacuumAt.Before(next) {
			sleepCtx(ctx, time.Until(next))
			return
		}
		sleepCtx(ctx, time.Until(r.vacuumAt))
		if ctx.Err() != nil {
			return
		}
		r.vacuum(ctx)
		r.vacuumAt = time.Now().Add(r.cfg.VacuumInterval)
	}
}

// vacuumLogEvery is how many VACUUM failures in a row make one log line
// after the first: a database that refuses every ten seconds says so
// every five minutes, not every time.
const vacuumLogEvery = 30

// vacuum runs one Partitions.Vacuum and counts it. A failure is logged
// on the first time and every vacuumLogEvery-th in a row after it, and
// the recovery once; the passes go on either way.
func (r *Retention) vacuum(ctx context.Context) {
	start := time.Now()
	rep, err := r.parts.Vacuum(ctx)
	took := time.Since(start)
	r.mu.Lock()
	r.stats.Vacuums += int64(len(rep.Vacuumed))
	r.stats.VacuumedDeadRows += rep.DeadRows
	r.stats.VacuumTime += took
	r.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil:
		// Cut short by the end of the term: not a failure.
	case err != nil:
		if r.vacuumFailing%vacuumLogEvery == 0 {
			r.log.Warn("retention could not vacuum the partitions; autovacuum is left to it until a VACUUM succeeds", "error", err, "failures", r.vacuumFailing+1)
		}
		r.vacuumFailing++
	default:
		// Each partition vacuumed is logged by Partitions.Vacuum (debug).
		if r.vacuumFailing > 0 {
			r.log.Info("retention vacuums the partitions again", "failures", r.vacuumFailing)
			r.vacuumFailing = 0
		}
	}
}
