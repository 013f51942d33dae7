package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// prune on the partitioned layout (docs/SCHEMA.md): before deleting rows
// it does what the relays' retention leader does in each pass
// (postgres.Partitions.Maintain): it drops every partition whose period
// ended before the cutoff and that holds nothing to keep, moving its dead
// letters to the default partition first, IDs kept, and creates the
// partitions of the current and next periods that are missing, which
// nothing else does where the relays keep everything. The batched deletes
// then take what is left: the default and legacy partitions, and the
// partitions that could not be dropped.

// partitions is the partition maintainer of --schema and --table.
func (a *app) partitions(pool *pgxpool.Pool) (*postgres.Partitions, error) {
	p, err := postgres.NewPartitions(pool, &postgres.PartitionsConfig{Schema: a.g.schema, Table: a.g.table})
	if err != nil {
		return nil, a.dbError(err)
	}
	return p, nil
}

// maintainPartitions drops the retired partitions (published before
// published; processed records before processed, when not zero) and
// reports what it did, and whether either table is partitioned. It does
// nothing on the plain layout.
func (a *app) maintainPartitions(ctx context.Context, pool *pgxpool.Pool, published, processed time.Time) (bool, error) {
	p, err := a.partitions(pool)
	if err != nil {
		return false, err
	}
	rep, err := p.Maintain(ctx, postgres.PartitionMaintenance{PublishedBefore: published, ProcessedBefore: processed})
	if err != nil {
		return false, a.dbError(err)
	}
	if rep.Outbox == postgres.PartitionNone && rep.Processed == postgres.PartitionNone {
		return false, nil
	}
	if len(rep.Dropped) > 0 {
		fmt.Fprintf(a.stdout, "dropped %d retired partition(s): %s; %d dead letter(s) moved to the default partition, IDs kept\n",
			len(rep.Dropped), strings.Join(rep.Dropped, ", "), rep.DeadLettersMoved)
	} else {
		fmt.Fprintf(a.stdout, "dropped no partition: none ended before %s with nothing left to keep\n", rfc3339(published))
	}
	if len(rep.Created) > 0 {
		fmt.Fprintf(a.stdout, "created %d partition(s) for the periods ahead: %s\n", len(rep.Created), strings.Join(rep.Created, ", "))
	}
	if rep.Failed > 0 {
		a.warn("%d partition change(s) failed and are left for the next prune or retention pass (their rows are deleted in batches meanwhile): %s",
			rep.Failed, oneLine(a.redact(rep.Err.Error())))
	}
	return true, nil
}

// duePartitions names the outbox partitions whose period ended before
// cutoff: what prune drops, unless one still holds rows to keep (--dry-run
// lists them).
func (a *app) duePartitions(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time) ([]string, bool, error) {
	p, err := a.partitions(pool)
	if err != nil {
		return nil, false, err
	}
	layout, err := p.Layout(ctx)
	if err != nil || layout == postgres.PartitionNone {
		return nil, false, a.dbErrorOrNil(err)
	}
	parts, err := p.List(ctx)
	if err != nil {
		return nil, true, a.dbError(err)
	}
	var due []string
	for _, pi := range parts {
		if pi.Table == a.g.table && !pi.Default && !pi.To.IsZero() && !pi.To.After(cutoff) {
			due = append(due, pi.Name)
		}
	}
	return due, true, nil
}

func (a *app) dbErrorOrNil(err error) error {
	if err == nil {
		return nil
	}
	return a.dbError(err)
}
