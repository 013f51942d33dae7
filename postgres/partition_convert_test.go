package postgres_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The online conversion: a plain table with history, dead letters and a
// backlog is converted while a writer adds events and a relay drains
// them. Nothing written is lost or refused, every event is relayed, the
// old rows are the legacy partition, rows created after the cut-over go
// to their period's partition, and once its rows are retired the legacy
// partition is dropped like any other, its dead letters kept.
func TestConvertToPartitionedOnline(t *testing.T) {
	t.Parallel()
	plain := newDB(t, 8)
	d := pdb{testDB: plain}
	ctx := ctxT(t)
	ob := d.table("outbox_events")
	d.exec(t, `INSERT INTO `+ob+` (event_type, payload, created_at, available_at, published_at)
SELECT 'history', '{}', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days' FROM generate_series(1, 300)`)
	dead := retQueryIDs(t, d.pool, `INSERT INTO `+ob+` (event_type, payload, created_at, dead_at, attempts, last_error)
SELECT 'poison', '{}', now() - interval '1 day', now() - interval '1 day', 5, 'poison' FROM generate_series(1, 5) RETURNING id::text`)
	d.exec(t, `INSERT INTO `+ob+` (event_type, payload) SELECT 'backlog', '{}' FROM generate_series(1, 200)`)

	pub := memory.NewPublisher()
	relayStore := newStore(t, plain, postgres.Config{})
	relayStore.SetFloorFullEveryForTest(100 * time.Millisecond)
	stopRelay := runRelay(t, relayStore, pub, core.RelayConfig{BatchSize: 20, PollInterval: 5 * time.Millisecond})

	// A writer, all along.
	writer := newStore(t, plain, postgres.Config{})
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		written []core.ID
		werr    error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			e := mustEvent(t, "live", nil)
			if err := addTx(ctx, writer, d.pool, e); err != nil {
				werr = err
				return
			}
			written = append(written, e.ID)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(100 * time.Millisecond)

	rep, err := postgres.ConvertToPartitioned(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: postgres.PartitionHourly})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("converted: cut-over %s, legacy %s, created %v, the swap held the table %v, warnings %v", rep.CutOver, rep.Legacy, rep.Created, rep.Took, rep.Warnings)
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings: %v", rep.Warnings)
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if werr != nil {
		t.Fatalf("a writer's Add failed during the conversion: %v", werr)
	}
	waitFor(t, 30*time.Second, "the backlog and the live events relayed", func() bool {
		return count(t, plain, "published_at IS NULL AND dead_at IS NULL") == 0
	})
	got := map[core.ID]int{}
	for _, e := range pub.Published() {
		got[e.ID]++
	}
	for _, id := range written {
		if got[id] == 0 {
			t.Fatalf("live event %s written during the conversion was not relayed", id)
		}
	}
	if n := count(t, plain, "event_type = 'backlog' AND published_at IS NOT NULL"); n != 200 {
		t.Fatalf("%d of the 200 backlog events published", n)
	}
	waitFor(t, 10*time.Second, "the running relay's store to see the new layout", relayStore.PartitionedForTest)

	// The layout, and the migrations, as expected.
	var kind, legacyOf string
	if err := d.pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, ob).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("outbox table kind %q, %v; want partitioned", kind, err)
	}
	if err := d.pool.QueryRow(ctx, `SELECT inhparent::regclass::text FROM pg_inherits WHERE inhrelid = $1::regclass`, d.table("outbox_events_legacy")).Scan(&legacyOf); err != nil || legacyOf != d.regclass("outbox_events") {
		t.Fatalf("legacy partition of %q, %v", legacyOf, err)
	}
	if n := count(t, plain, "tableoid = '"+d.regclass("outbox_events_legacy")+"'::regclass"); n != 505+int64(len(written)) {
		t.Fatalf("legacy partition holds %d rows, want all %d (nothing is created after the cut-over yet)", n, 505+len(written))
	}
	if err := writer.Check(ctx); err != nil {
		t.Fatal(err)
	}
	for _, layout := range []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionHourly} {
		if err := postgres.Migrate(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: layout}); err != nil {
			t.Fatalf("Migrate (%s) after the conversion: %v", layout, err)
		}
	}
	if again, err := postgres.ConvertToPartitioned(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: postgres.PartitionHourly}); err != nil || !again.CutOver.IsZero() {
		t.Fatalf("second conversion = %+v, %v; want nothing done", again, err)
	}
	var pubTable string
	if err := d.pool.QueryRow(ctx, `SELECT tablename::text FROM pg_publication_tables WHERE pubname = $1`, postgres.PublicationNameForTest(d.schema, "outbox_events")).Scan(&pubTable); err != nil || pubTable != "outbox_events" {
		t.Fatalf("the wake-up publication publishes %q (%v), want the partitioned table", pubTable, err)
	}

	// After the cut-over, rows go to their period.
	e := mustEvent(t, "after", nil)
	e.CreatedAt, e.AvailableAt = rep.CutOver.Add(time.Minute), time.Now().Add(-time.Second)
	if err := addTx(ctx, writer, d.pool, e); err != nil {
		t.Fatal(err)
	}
	if p := d.partitionOf(t, e.ID); p != d.regclass(postgres.PartitionHourly.PartitionName("outbox_events", rep.CutOver)) {
		t.Fatalf("event created after the cut-over is in %s", p)
	}
	waitFor(t, 10*time.Second, "the event after the cut-over relayed", func() bool { return count(t, plain, "event_type = 'after' AND published_at IS NOT NULL") == 1 })
	stopRelay()

	// Retired, the legacy partition goes like any other.
	parts, err := postgres.NewPartitions(d.pool, &postgres.PartitionsConfig{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	mrep, err := parts.Maintain(ctx, postgres.PartitionMaintenance{PublishedBefore: rep.CutOver.Add(time.Minute)})
	if err != nil || !slices.Contains(mrep.Dropped, "outbox_events_legacy") || mrep.DeadLettersMoved != 5 {
		t.Fatalf("Maintain = %+v, %v; want the legacy partition dropped and its 5 dead letters moved", mrep, err)
	}
	kept := retQueryIDs(t, d.pool, `SELECT id::text FROM `+d.table("outbox_events_default")+` WHERE dead_at IS NOT NULL`)
	if !retSameSet(kept, dead) {
		t.Fatalf("dead letters after the legacy partition went: %v, want %v", kept, dead)
	}
	var _ = context.Background
}
