package postgres

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// A slot claim that found nothing, topped up by a claim that found
// something, keeps the second claim's created_at bounds: the settlement
// keeps to their partitions (a lost bound made it look for the rows'
// addresses in every partition).
func TestMergedBatchesKeepCreatedBounds(t *testing.T) {
	at := func(h int) pgtype.Timestamptz {
		return pgtype.Timestamptz{Time: time.Date(2030, 1, 1, h, 0, 0, 0, time.UTC), Valid: true}
	}
	empty := core.Batch{Lease: core.Lease{Handle: &rowRefs{created: createdBounds{part: true}}}}
	id := core.NewID()
	full := core.Batch{Events: []core.Event{{ID: id}}, Lease: core.Lease{Handle: &rowRefs{
		ids: []core.ID{id}, tids: []pgtype.TID{{Valid: true}}, pos: []int64{1},
		created: createdBounds{lo: at(1), hi: at(2), part: true},
	}}}
	for _, c := range []struct {
		name string
		a, b core.Batch
	}{{"empty first", empty, full}, {"empty second", full, empty}} {
		got := mergeBatches(c.a, c.b).Lease.Handle.(*rowRefs).created
		if !got.lo.Valid || !got.lo.Time.Equal(at(1).Time) || !got.hi.Time.Equal(at(2).Time) {
			t.Errorf("%s: merged bounds %+v, want 01:00 to 02:00", c.name, got)
		}
	}
	plain := core.Batch{Events: []core.Event{{ID: id}}, Lease: core.Lease{Handle: &rowRefs{ids: []core.ID{id}, tids: []pgtype.TID{{Valid: true}}, pos: []int64{1}}}}
	if got := mergeBatches(plain, full).Lease.Handle.(*rowRefs).created; got.lo.Valid {
		t.Errorf("a plain claim merged with a partitioned one has bounds %+v, want none", got)
	}
	var b createdBounds
	for _, v := range []pgtype.Timestamptz{at(5), {InfinityModifier: pgtype.NegativeInfinity, Valid: true}, at(3), {InfinityModifier: pgtype.Infinity, Valid: true}} {
		b.add(v)
	}
	if b.lo.InfinityModifier != pgtype.NegativeInfinity || b.hi.InfinityModifier != pgtype.Infinity {
		t.Errorf("bounds over infinities: %+v", b)
	}
}

// The store looks for its floor and created_at range again as soon as
// the current period ends.
func TestFloorSearchAtTheEndOfThePeriod(t *testing.T) {
	f := &claimFloor{}
	now := time.Now()
	f.at, f.pos, f.nextFull = pgtype.Timestamptz{Time: now, Valid: true}, 1, now.Add(time.Hour)
	f.created = createdRange{floor: lowest, ceiling: highest, until: now.Add(time.Minute)}
	if a, _ := f.next(now); a.full {
		t.Fatal("a search before the period ended")
	}
	if a, _ := f.next(now.Add(time.Minute)); !a.full {
		t.Fatal("no search once the period ended")
	}
}

// PartitionsAhead counts periods of the outbox table; the processed
// table, by day on every partitioned layout, keeps as many days as cover
// the same time, at least its default, and its migration renders with
// its own period.
func TestPartitionsAheadOfEachTable(t *testing.T) {
	p5 := PartitionMinutes(5)
	for _, c := range []struct {
		table, outbox Partitioning
		ahead, want   int
	}{
		{PartitionDaily, PartitionDaily, 0, 2},
		{PartitionDaily, PartitionDaily, 1, 1}, // one period: as given
		{PartitionDaily, PartitionDaily, 9, 9},
		{PartitionDaily, PartitionHourly, 0, 2},
		{PartitionDaily, PartitionHourly, 4, 2},
		{PartitionDaily, PartitionHourly, 49, 3}, // 49 hours: 3 days
		{PartitionDaily, p5, 12, 2},
		{PartitionDaily, p5, 577, 3},             // 48 hours and 5 minutes
		{PartitionHourly, PartitionHourly, 7, 7}, // an hourly processed table of an earlier version
		{PartitionHourly, PartitionNone, 7, 7},
		{p5, p5, 0, 6},
	} {
		if got := aheadOf(c.table, c.outbox, c.ahead); got != c.want {
			t.Errorf("aheadOf(%v, %v, %d) = %d, want %d", c.table, c.outbox, c.ahead, got, c.want)
		}
	}

	n, err := newNames(DefaultSchema, DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		layout            Partitioning
		ahead             int
		outbox, processed string // the loops' bounds and periods' seconds
	}{
		{PartitionHourly, 0, "0..4 LOOP", "0..2 LOOP"},
		{PartitionHourly, 60, "0..60 LOOP", "0..3 LOOP"},
		{p5, 0, "0..6 LOOP", "0..2 LOOP"},
		{PartitionDaily, 5, "0..5 LOOP", "0..5 LOOP"},
	} {
		ms, err := renderLayout(n, c.layout, c.ahead)
		if err != nil {
			t.Fatal(err)
		}
		outbox, processed := ms[0].Up, ms[2].Up
		if !strings.Contains(outbox, c.outbox) || !strings.Contains(outbox, "/ "+strconv.Itoa(int(c.layout.period()/time.Second))+")") {
			t.Errorf("%v, ahead %d: migration 001 does not loop %q in periods of %v:\n%s", c.layout, c.ahead, c.outbox, c.layout.period(), outbox)
		}
		if !strings.Contains(processed, c.processed) || !strings.Contains(processed, "/ 86400)") || !strings.Contains(processed, "'YYYYMMDD'") || !strings.Contains(processed, "(1 day, UTC") {
			t.Errorf("%v, ahead %d: migration 003 does not loop %q in days:\n%s", c.layout, c.ahead, c.processed, processed)
		}
	}
}
