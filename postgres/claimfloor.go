package postgres

import (
	"context"
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
// case for ordinary transactions. For the rest, the store looks for the
// floor from the very beginning of the pending set (floorSQL, one index
// scan stepping over every dead entry there) before its first claim, and
// again every floorFullEvery, or, when that scan is slow, every
// floorFullShare times as long as it last took, so that it costs at most
// about 2 % of one connection's time. The claim that follows starts at
// what it found, so such rows are claimed then, oldest first; until then,
// they wait.
const (
	floorFullEvery = 5 * time.Second
	floorFullShare = 50
)

// claimFloor is a store's floor. Claims read it through Store.floorArgs
// and report the floor their statement found (saw).
type claimFloor struct {
	mu       sync.Mutex
	at       pgtype.Timestamptz // not Valid until a claim or a search found one
	pos      int64
	nextFull time.Time     // when to search from the beginning again
	search   chan struct{} // closed when the search under way ends; nil if none is
	every    time.Duration // floorFullEvery when 0 (tests set it)
	// created is the partitioned layout's created_at range
	// (createdfloor.go), found by the last search (zero: none yet).
	created createdRange
}

// floorArgs is the floor one claim starts from.
type floorArgs struct {
	at    pgtype.Timestamptz
	pos   int64
	full  bool      // from the beginning of the pending set
	start time.Time // when it was handed out
	// created is the created_at range of the partitioned layout's
	// claim (createdfloor.go).
	created createdRange
}

// lowest is the floor at the beginning of the pending set: below every
// row, whatever a foreign writer stored in available_at.
var lowest = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}

// floorArgs returns the floor the next claim starts from, first looking
// for it from the beginning of the pending set when that is due. A store
// without a floor yet has its other claims wait for that search; should it
// fail, the claim starts from the beginning itself.
func (s *Store) floorArgs(ctx context.Context) floorArgs {
	f := s.plans.floor
	for {
		a, wait := f.next(time.Now())
		switch {
		case wait != nil:
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return a // the claim fails on ctx
			}
		case !a.full:
			return a
		}
		var fl foundFloor
		var partitioned bool
		err := s.db.QueryRow(ctx, floorSQL(s.n), s.relayArgs([]any{a.at, a.pos, s.n.outbox})...).Scan(&fl.at, &fl.pos, &partitioned)
		created := everything
		if err == nil {
			s.sawLayout(partitioned)
			if partitioned {
				created = s.createdFloor(ctx)
			}
		}
		f.searched(a, fl, created, err == nil, time.Now())
		if err != nil || !fl.at.Valid {
			return a
		}
		return floorArgs{at: fl.at, pos: fl.pos, start: a.start, created: created}
	}
}

// next returns the floor the next claim starts from, the beginning of the
// pending set (full) when the caller is to search from there, or a channel
// to wait on while another caller searches for a floor the store does not
// have yet.
func (f *claimFloor) next(now time.Time) (floorArgs, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.search != nil && !f.at.Valid:
		return floorArgs{at: lowest, pos: math.MinInt64, full: true, start: now, created: everything}, f.search
	case f.search == nil && (!f.at.Valid || !now.Before(f.nextFull) || !f.created.until.IsZero() && !now.Before(f.created.until)):
		// Due, or the current period ended (createdfloor.go).
		f.search, f.nextFull = make(chan struct{}), now.Add(f.fullEvery())
		return floorArgs{at: lowest, pos: math.MinInt64, full: true, start: now, created: everything}, nil
	}
	created := f.created
	if !created.floor.Valid {
		created = everything
	}
	return floorArgs{at: f.at, pos: f.pos, start: now, created: created}, nil
}

// searched records the end of a search from the beginning that started
// as a says: the floor it found, if ok, replaces the store's (it may lie
// below it), and the next search is due after the longer of the period
// and floorFullShare times this one's duration.
func (f *claimFloor) searched(a floorArgs, fl foundFloor, created createdRange, ok bool, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextFull = a.start.Add(max(f.fullEvery(), floorFullShare*now.Sub(a.start)))
	if ok && fl.at.Valid {
		f.at, f.pos = fl.at, fl.pos
	}
	f.created = created
	close(f.search)
	f.search = nil
}

func (f *claimFloor) fullEvery() time.Duration {
	if f.every != 0 {
		return f.every
	}
	return floorFullEvery
}

// saw records the floor found by a claim that started from a: a claim from
// the beginning (its search failed) replaces the floor, any other raises
// it.
func (f *claimFloor) saw(a floorArgs, at pgtype.Timestamptz, pos int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
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
