package postgres

import (
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
