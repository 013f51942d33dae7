package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// The partitioned layout in /metrics. Before its relay starts, every
// partsEvery while it runs, and within a tenant check (tenantCheckEvery)
// of its retention changing them, each tenant lists its tables' partitions
// (postgres.Partitions.List: two catalog reads per table), in a goroutine
// of its own as the doctor's checks run, and keeps two things: the outbox table's layout, which
// decides whether the tenant reports the retention's partition counters,
// and when the newest period partition ends, which
// outboxctl_partitions_ahead_seconds reports against the clock at each
// scrape. Rows of a period without a partition go to the default
// partition, which only batched deletes prune; the gauge says how long
// until that happens should nothing create partitions any more (no
// retention leader, or its changes failing).

// partsEvery is how often a tenant lists its partitions.
const partsEvery = 30 * time.Second

// partsState is what a tenant last learnt of its partitions.
type partsState struct {
	running atomic.Bool
	last    atomic.Int64 // unix nanoseconds of the last start
	// changes is partitionChanges at the last start.
	changes atomic.Int64
	// known is set once a listing succeeded; layout and until are
	// guarded by tenant.mu.
	known  bool
	layout postgres.Partitioning
	// until is when the newest period partition of the outbox or the
	// processed table ends, whichever is sooner (zero when neither has
	// one).
	until time.Time
}

// maybeListPartitions lists the tenant's partitions when due, or when
// this process's retention changed them since the last listing, and not
// already listing.
func (t *tenant) maybeListPartitions(ctx context.Context, now time.Time) {
	changed := t.partitionChanges() != t.parts.changes.Load()
	if !changed && now.UnixNano()-t.parts.last.Load() < int64(partsEvery) || !t.parts.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer t.parts.running.Store(false)
		t.listPartitions(ctx)
	}()
}

// partitionChanges counts the partitions this process's retention created
// and dropped.
func (t *tenant) partitionChanges() int64 {
	t.mu.Lock()
	r := t.retention
	t.mu.Unlock()
	if r == nil {
		return 0
	}
	st := r.Stats()
	return st.PartitionsCreated + st.PartitionsDropped
}

// listPartitions reads the tenant's layout and partitions. The tenant
// runs it before each start of its relay too, so that the partition
// counters are served from the first scrape that shows the tenant ready.
func (t *tenant) listPartitions(ctx context.Context) {
	t.parts.last.Store(time.Now().UnixNano())
	t.parts.changes.Store(t.partitionChanges())
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	p, err := postgres.NewPartitions(t.db.pool, &postgres.PartitionsConfig{Schema: t.schema, Table: t.table, Logger: t.log})
	if err != nil {
		return
	}
	layout, err := p.Layout(cctx)
	if err != nil {
		// The pings and the schema check report an unreachable or
		// unmigrated database; what was known stays until a listing
		// succeeds.
		return
	}
	var parts []postgres.PartitionInfo
	if layout != postgres.PartitionNone {
		if parts, err = p.List(cctx); err != nil {
			return
		}
	}
	until := newestPeriodEnd(parts)
	t.mu.Lock()
	t.parts.known, t.parts.layout, t.parts.until = true, layout, until
	t.mu.Unlock()
}

// newestPeriodEnd is, of the tables parts covers, the soonest of each
// table's newest period end: how far ahead both have partitions.
func newestPeriodEnd(parts []postgres.PartitionInfo) time.Time {
	newest := map[string]time.Time{}
	for _, pi := range parts {
		if pi.Default || pi.To.IsZero() {
			continue
		}
		if pi.To.After(newest[pi.Table]) {
			newest[pi.Table] = pi.To
		}
	}
	var until time.Time
	for _, end := range newest {
		if until.IsZero() || end.Before(until) {
			until = end
		}
	}
	return until
}

// partitioned returns whether the tenant's outbox table was partitioned
// at the last listing, and when its newest period partition ends.
func (t *tenant) partitioned() (bool, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parts.known && t.parts.layout != postgres.PartitionNone, t.parts.until
}
