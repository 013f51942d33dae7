package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// Retention on the partitioned layout keeps exactly what it keeps on the
// plain one (the same seed as the plain tests), and gets there by dropping
// whole partitions: retired published events are not deleted row by row,
// dead letters of dropped partitions are moved to the default partition
// with their IDs, and a partition holding a pending event stays, its
// retired rows deleted in batches.
func TestRetentionPartitioned(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	var now time.Time
	if err := d.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	// The seed's rows are up to 91 days old: give them their days.
	for _, ago := range []int{91, 61, 60, 9, 6} {
		from := now.Add(-time.Duration(ago) * 24 * time.Hour)
		if _, err := d.parts.Create(ctx, from, from.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	seed := seedRetention(t, d.pool, d.schema, 3)
	// A published row beside the pending ones of 60 days ago: its
	// partition stays, so it is deleted as on the plain layout.
	old := retQueryIDs(t, d.pool, `INSERT INTO `+d.table("outbox_events")+` (event_type, payload, created_at, available_at, published_at)
VALUES ('retention.test', '{}', now() - interval '60 days', now() - interval '60 days', now() - interval '59 days') RETURNING id::text`)
	seed.drop = append(seed.drop, old...)
	dead := retQueryIDs(t, d.pool, `SELECT id::text FROM `+d.table("outbox_events")+` WHERE dead_at IS NOT NULL`)
	if len(dead) != 3 {
		t.Fatalf("seed has %d dead letters, want 3", len(dead))
	}
	inDefault := func() int {
		var n int
		if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+d.table("outbox_events_default")+` WHERE dead_at IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := inDefault(); n != 0 {
		t.Fatalf("%d dead letters in the default partition before retention, want them in their day's", n)
	}
	before := d.partitionNames(t)

	r, err := postgres.NewRetention(d.pool, &postgres.RetentionConfig{Schema: d.schema, Holder: "part"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRetained(t, d.pool, d.schema, seed)
	if res.PublishedDeleted != 1 {
		t.Fatalf("deleted %d published rows one by one, want 1 (the one beside pending events); the rest go with their partitions", res.PublishedDeleted)
	}
	if res.Partitions.DeadLettersMoved != 3 || inDefault() != 3 {
		t.Fatalf("moved %d dead letters, %d in the default partition; want 3 and 3", res.Partitions.DeadLettersMoved, inDefault())
	}
	after := d.partitionNames(t)
	day := func(ago int) string {
		return postgres.PartitionDaily.PartitionName("outbox_events", now.Add(-time.Duration(ago)*24*time.Hour))
	}
	for _, ago := range []int{91, 61, 9} {
		if !before[day(ago)] || after[day(ago)] {
			t.Errorf("partition %s (%d days ago): before %v, after %v; want it dropped", day(ago), ago, before[day(ago)], after[day(ago)])
		}
	}
	for _, ago := range []int{60, 6, 0} {
		if !after[day(ago)] {
			t.Errorf("partition %s (%d days ago) dropped; it holds rows to keep", day(ago), ago)
		}
	}
	for ahead := 1; ahead <= postgres.DefaultPartitionsAhead(postgres.PartitionDaily); ahead++ {
		if !after[day(-ahead)] {
			t.Errorf("partition %s (%d days ahead) missing", day(-ahead), ahead)
		}
	}
	if len(res.Partitions.Dropped) != 6 { // 3 of each table: the processed table's days are empty
		t.Errorf("dropped %v, want the 3 retired days of each table", res.Partitions.Dropped)
	}
	if st := r.Stats(); st.PartitionsDropped != int64(len(res.Partitions.Dropped)) || st.DeadLettersMoved != 3 {
		t.Errorf("stats: %d partitions dropped, %d dead letters moved", st.PartitionsDropped, st.DeadLettersMoved)
	}

	// The moved dead letters are what they were: listed, and replayable.
	s := newStore(t, d.testDB, postgres.Config{})
	recs, err := s.DeadLetters(ctx, 10, core.ID{})
	if err != nil || len(recs) != 3 {
		t.Fatalf("DeadLetters = %d, %v; want the 3 moved", len(recs), err)
	}
	for _, rec := range recs {
		if rec.LastError != "poison" || rec.Attempts != 10 || !slices.Contains(dead, rec.ID.String()) {
			t.Fatalf("moved dead letter %+v changed", rec)
		}
	}
	if n, err := s.Replay(ctx, core.ReplayFilter{IDs: []core.ID{recs[0].ID}}); err != nil || n != 1 {
		t.Fatalf("Replay of a moved dead letter = %d, %v", n, err)
	}

	// A second pass has nothing left to drop.
	res, err = r.RunOnce(ctx)
	if err != nil || len(res.Partitions.Dropped) != 0 || res.PublishedDeleted != 0 {
		t.Fatalf("second pass: %+v, %v; want nothing to do", res.Partitions, err)
	}
}

// A partition change waits for its lock at most LockTimeout, fails
// without harm while a transaction holds the table, and succeeds at the
// next pass; the periods ahead are created again when missing.
func TestPartitionMaintenanceLockTimeout(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionHourly)
	ctx := ctxT(t)
	var now time.Time
	if err := d.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if _, err := d.parts.Create(ctx, now.Add(-3*time.Hour), now); err != nil {
		t.Fatal(err)
	}
	old := postgres.PartitionHourly.PartitionName("outbox_events", now.Add(-3*time.Hour))
	ahead := postgres.PartitionHourly.PartitionName("outbox_events", now.Add(3*time.Hour))
	d.exec(t, "DROP TABLE "+d.table(ahead))

	// A writer's transaction, open: it holds the table's ROW EXCLUSIVE
	// lock, which a detach must wait for.
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, `INSERT INTO `+d.table("outbox_events")+` (event_type, payload) VALUES ('open', '{}')`); err != nil {
		t.Fatal(err)
	}
	p, err := postgres.NewPartitions(d.pool, &postgres.PartitionsConfig{Schema: d.schema, LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := p.Maintain(ctx, postgres.PartitionMaintenance{PublishedBefore: now.Add(-time.Hour)})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed == 0 || slices.Contains(rep.Dropped, old) {
		t.Fatalf("Maintain beside an open writer: %+v; want the drop of %s to fail", rep, old)
	}
	if !slices.Contains(rep.Created, ahead) {
		t.Fatalf("Maintain created %v, want the missing %s (an attach does not wait for writers)", rep.Created, ahead)
	}
	if took > 5*time.Second {
		t.Fatalf("Maintain took %v beside an open transaction, want about its lock timeouts", took)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = p.Maintain(ctx, postgres.PartitionMaintenance{PublishedBefore: now.Add(-time.Hour)})
	if err != nil || rep.Failed != 0 || !slices.Contains(rep.Dropped, old) {
		t.Fatalf("Maintain after the writer committed: %+v, %v; want %s dropped", rep, err, old)
	}
}

var _ = pgx.Identifier{}
var _ context.Context
