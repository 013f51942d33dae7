package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The processed table is converted with the outbox table, while a
// consumer records effects through a Deduper and redelivers some: no
// record is lost or refused, every redelivery before, during and after
// the swap finds its record (no effect applied twice), the old records
// are the legacy partition, records of events created after the
// cut-over go to their day's partition, and the legacy partition retires
// like any other.
func TestConvertProcessedOnline(t *testing.T) {
	t.Parallel()
	plain := newDB(t, 8)
	d := pdb{testDB: plain}
	ctx := ctxT(t)
	dedup, err := postgres.NewDeduper(d.pool, &postgres.DeduperConfig{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		applied = map[core.DedupeKey]int{}
	)
	once := func(k core.DedupeKey) (bool, error) {
		return dedup.Once(ctx, k, func(ctx context.Context) error {
			mu.Lock()
			applied[k]++
			mu.Unlock()
			return nil
		})
	}
	var keys []core.DedupeKey
	for range 200 {
		k := core.DedupeKey{Consumer: "billing", EventID: core.NewID()}
		if ok, err := once(k); err != nil || !ok {
			t.Fatalf("first delivery of %v: applied %v, %v", k, ok, err)
		}
		keys = append(keys, k)
	}

	// A consumer, all along: a new event and a redelivery of an earlier
	// one each round.
	var (
		wg   sync.WaitGroup
		stop atomic.Bool
		cerr error
		live []core.DedupeKey
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			k := core.DedupeKey{Consumer: "billing", EventID: core.NewID()}
			if ok, err := once(k); err != nil || !ok {
				cerr = fmt.Errorf("new delivery %v: applied %v, %w", k, ok, err)
				return
			}
			live = append(live, k)
			if ok, err := once(keys[i%len(keys)]); err != nil || ok {
				cerr = fmt.Errorf("redelivery of %v: applied %v, %w", keys[i%len(keys)], ok, err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(100 * time.Millisecond)

	rep, err := postgres.ConvertToPartitioned(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: postgres.PartitionHourly})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if cerr != nil {
		t.Fatalf("the consumer during the conversion: %v", cerr)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings: %v", rep.Warnings)
	}
	p := rep.Processed
	if p == nil {
		t.Fatal("the processed table was not converted")
	}
	t.Logf("processed: cut-over %s, legacy %s, created %v, the swap held it %v", p.CutOver, p.Legacy, p.Created, p.Took)
	if p.Legacy != "outbox_events_processed_legacy" || !p.CutOver.Equal(p.CutOver.Truncate(24*time.Hour)) || time.Until(p.CutOver) < postgres.ConvertCutOverMargin-time.Minute {
		t.Fatalf("processed conversion %+v: want the legacy partition outbox_events_processed_legacy and a midnight at least the margin away", p)
	}
	for i := range postgres.DefaultPartitionsAhead(postgres.PartitionDaily) + 1 {
		if name := postgres.PartitionDaily.PartitionName("outbox_events_processed", p.CutOver.Add(time.Duration(i)*24*time.Hour)); !slices.Contains(p.Created, name) {
			t.Errorf("created %v, without %s", p.Created, name)
		}
	}

	proc := d.table("outbox_events_processed")
	var kind, legacyOf string
	if err := d.pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, proc).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("processed table kind %q, %v; want partitioned", kind, err)
	}
	if err := d.pool.QueryRow(ctx, `SELECT inhparent::regclass::text FROM pg_inherits WHERE inhrelid = $1::regclass`, d.table("outbox_events_processed_legacy")).Scan(&legacyOf); err != nil || legacyOf != d.regclass("outbox_events_processed") {
		t.Fatalf("legacy partition of %q, %v", legacyOf, err)
	}
	var n, inLegacy int
	if err := d.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tableoid = $1::regclass) FROM `+proc, d.table("outbox_events_processed_legacy")).Scan(&n, &inLegacy); err != nil {
		t.Fatal(err)
	}
	if want := len(keys) + len(live); n != want || inLegacy != want {
		t.Fatalf("%d records, %d in the legacy partition; want all %d there", n, inLegacy, want)
	}
	var pk string
	if err := d.pool.QueryRow(ctx, `SELECT conname::text FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, proc).Scan(&pk); err != nil || pk != "outbox_events_processed_pkey" {
		t.Fatalf("the partitioned table's primary key is %q (%v), want the plain table's name", pk, err)
	}

	// Every effect once, and every redelivery still refused.
	for _, k := range append(slices.Clone(keys), live...) {
		if ok, err := once(k); err != nil || ok {
			t.Fatalf("redelivery of %v after the conversion: applied %v, %v", k, ok, err)
		}
	}
	for k, times := range applied {
		if times != 1 {
			t.Fatalf("effect of %v applied %d times", k, times)
		}
	}

	// After the cut-over, records go to their day.
	later := core.DedupeKey{Consumer: "billing", EventID: uuidV7At(t, p.CutOver.Add(25*time.Hour))}
	if ok, err := once(later); err != nil || !ok {
		t.Fatalf("delivery of an event after the cut-over: applied %v, %v", ok, err)
	}
	var part string
	if err := d.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+proc+` WHERE event_id = $1`, later.EventID).Scan(&part); err != nil ||
		part != d.regclass(postgres.PartitionDaily.PartitionName("outbox_events_processed", p.CutOver.Add(24*time.Hour))) {
		t.Fatalf("record of an event a day after the cut-over in %q (%v)", part, err)
	}

	// Migrations and a second conversion see a partitioned table.
	for _, layout := range []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionHourly} {
		if err := postgres.Migrate(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: layout}); err != nil {
			t.Fatalf("Migrate (%s) after the conversion: %v", layout, err)
		}
	}
	if again, err := postgres.ConvertToPartitioned(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: postgres.PartitionHourly}); err != nil || !again.CutOver.IsZero() || again.Processed != nil {
		t.Fatalf("second conversion = %+v, %v; want nothing done", again, err)
	}

	// Retired, the legacy partition goes like any other.
	parts, err := postgres.NewPartitions(d.pool, &postgres.PartitionsConfig{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	mrep, err := parts.Maintain(ctx, postgres.PartitionMaintenance{ProcessedBefore: p.CutOver.Add(time.Minute)})
	if err != nil || !slices.Contains(mrep.Dropped, "outbox_events_processed_legacy") {
		t.Fatalf("Maintain = %+v, %v; want the processed legacy partition dropped", mrep, err)
	}
}

// A processed table holding a record of an ID that is not a UUID v7 (at
// or above the cut-over's smallest UUID v7) is left plain, with a
// warning, and nothing of the attempt left behind; the outbox table is
// converted all the same.
func TestConvertProcessedRandomIDsStaysPlain(t *testing.T) {
	t.Parallel()
	plain := newDB(t, 2)
	d := pdb{testDB: plain}
	ctx := ctxT(t)
	proc := d.table("outbox_events_processed")
	d.exec(t, `INSERT INTO `+proc+` (consumer, event_id) VALUES ('c', 'f47ac10b-58cc-4372-a567-0e02b2c3d479'), ('c', $1)`, core.NewID())
	rep, err := postgres.ConvertToPartitioned(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: postgres.PartitionDaily})
	if err != nil {
		t.Fatal(err)
	}
	if rep.CutOver.IsZero() || rep.Processed != nil {
		t.Fatalf("report %+v: want the outbox table converted and the processed table not", rep)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "stays plain") || !strings.Contains(rep.Warnings[0], "1 of its records") {
		t.Fatalf("warnings %q: want one saying the processed table stays plain for its 1 record", rep.Warnings)
	}
	var kind string
	var checks int
	if err := d.pool.QueryRow(ctx, `SELECT relkind::text, (SELECT count(*) FROM pg_constraint WHERE conrelid = c.oid AND contype = 'c')
FROM pg_class c WHERE c.oid = $1::regclass`, proc).Scan(&kind, &checks); err != nil || kind != "r" || checks != 0 {
		t.Fatalf("processed table kind %q with %d checks (%v); want plain and no check left", kind, checks, err)
	}
	if n := d.exec(t, `INSERT INTO `+proc+` (consumer, event_id) VALUES ('c', 'ffffffff-58cc-4372-a567-0e02b2c3d479')`); n != 1 {
		t.Fatalf("a record of a random ID after the attempt: %d inserted", n)
	}
}

// uuidV7At is a UUID v7 of millisecond at, with random bits.
func uuidV7At(t *testing.T, at time.Time) core.ID {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(b[:6], ms[2:])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return core.ID(b)
}
