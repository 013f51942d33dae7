package postgres

import (
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The claim floor: where in the pending set claims start.
//
// Settling an event changes a column of the pending indexes' predicate, so
// the entry its row had there stays until VACUUM removes it, pointing at a
// row version that is no longer pending. Events are settled oldest first,
// so these entries pile up at the head of the pending index and at the
// head of each slot of the slot index: where every claim starts. A claim
// steps over each of them, visiting the heap as well until one scan has
// found the row dead to every transaction and marked the entry, and the
// marked entries still fill index pages it reads. With autovacuum off, or
// a long transaction holding VACUUM back, a claim's cost then grows with
// everything settled since the last VACUUM: near the end of a
// 1,000,000-event drain at batch 500, each slot claim read about 590 index
// pages, against 55 at 100,000 (docs/BENCHMARKS.md, "Growth").
//
// So claims start at a floor, a position (available_at, pos) below which
// no row is pending. Each claim statement finds the next floor as it runs
// (the first pending row at or after the current one, leased or not, in
// the statement's snapshot, so it steps only over what died since the
// previous claim) and returns it, and the store keeps the highest it has
// seen. Leased rows are pending, so a lease that expires or is released, a
// row given back after a failed claim, and the next event of an aggregate
// whose head is leased never lie below the floor; retries and replays move
// their row to a later available_at.
//
// What can lie below it is a row whose INSERT the floor's snapshot did not
// see: written by a transaction that committed more than a second after it
// began (available_at is the writer's transaction start by default), or
// with an available_at set in the past. The floor stays at least one
// second behind the database's clock (floorLag), which covers the first
// case for ordinary transactions; for the rest, a claim starts from the
// beginning of the pending set every floorFullEvery, or, when such claims
// are slow, every floorFullShare times as long as the last one took, so
// they cost at most about 2 % of the claims' time. Such rows are claimed
// oldest first when that claim runs, never lost; until it does, they wait.
const (
	floorFullEvery = 5 * time.Second
	floorFullShare = 50
)

// claimFloor is a store's floor. Every claim reads it (next) and reports
// the floor its statement found (saw).
type claimFloor struct {
	mu       sync.Mutex
	at       pgtype.Timestamptz // not Valid until the first claim returned
	pos      int64
	nextFull time.Time
	every    time.Duration // floorFullEvery when 0 (tests set it)
}

// floorArgs is the floor one claim starts from.
type floorArgs struct {
	at    pgtype.Timestamptz
	pos   int64
	full  bool      // from the beginning of the pending set
	start time.Time // when it was handed out
}

// lowest is the floor of a claim from the beginning: below every row,
// whatever a foreign writer stored in available_at.
var lowest = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}

// next returns the floor the next claim starts from.
func (f *claimFloor) next(now time.Time) floorArgs {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.at.Valid || !now.Before(f.nextFull) {
		// Until this claim reports back, the others keep to the floor.
		f.nextFull = now.Add(f.fullEvery())
		return floorArgs{at: lowest, pos: math.MinInt64, full: true, start: now}
	}
	return floorArgs{at: f.at, pos: f.pos, start: now}
}

func (f *claimFloor) fullEvery() time.Duration {
	if f.every != 0 {
		return f.every
	}
	return floorFullEvery
}

// known is whether the store has a floor yet.
func (f *claimFloor) known() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at.Valid
}

// saw records the floor a claim that started from a found: a claim from
// the beginning replaces the floor (it may have found rows below it),
// any other raises it. now is when the claim returned.
func (f *claimFloor) saw(a floorArgs, at pgtype.Timestamptz, pos int64, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a.full {
		f.nextFull = a.start.Add(max(f.fullEvery(), floorFullShare*now.Sub(a.start)))
	}
	if !at.Valid {
		return
	}
	if a.full || !f.at.Valid || compareFloor(at, pos, f.at, f.pos) > 0 {
		f.at, f.pos = at, pos
	}
}

// compareFloor orders two floors as the index does: by available_at, whose
// infinities a foreign writer may have stored, then by pos.
func compareFloor(at pgtype.Timestamptz, pos int64, bt pgtype.Timestamptz, bpos int64) int {
	if c := cmpInt64(int64(at.InfinityModifier), int64(bt.InfinityModifier)); c != 0 {
		return c
	}
	if at.InfinityModifier == pgtype.Finite {
		if c := at.Time.Compare(bt.Time); c != 0 {
			return c
		}
	}
	return cmpInt64(pos, bpos)
}
