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
