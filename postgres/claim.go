package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Claiming: Claim, the claim it prepares from a request, and the reading
// of its RETURNING rows into a batch in claim order. A short claim is
// topped up in topup.go, the lease handle is in rowrefs.go, the give-back
// of a failed claim in abandon.go, and the SQL in claim_sql.go.

// Claim leases up to req.Limit due events under a fresh lease token in one
// statement (docs/SCHEMA.md shows it), or two when a slot claim is topped
// up (below). Due means: neither published nor
// dead-lettered, AvailableAt reached, and no live lease; with ordering on,
// also the head of its aggregate; with req.Destination set, also bound for
// that destination. The events come back in the order they were selected:
// AvailableAt, then insertion order.
//
// "Now" is the database's now() unless req.Now is set, so relays on hosts
// with skewed clocks agree on lease expiry.
//
// Claims start at the store's floor, not at the head of the pending index,
// so that what was settled before it (whose index entries stay until
// VACUUM) costs nothing (claimfloor.go). An event whose available_at is
// more than a second in the past when its transaction commits may lie
// below the floor; it is claimed once the store next looks for the floor
// from the beginning of the pending set, every 5 s or more.
//
// A due row the claim cannot lease, because its attempts count (set by a
// foreign writer) is at the integer limit, is dead-lettered by the claim
// with the reason in last_error and logged, and another row is claimed in
// its place (see unleasable).
//
// When Claim fails after its statement may have reached the database (ctx
// cancelled mid-flight, the connection lost), the statement may still have
// committed; whatever it leased is then given back before Claim returns,
// under a context of its own (abandon.go), so no event waits out a lease
// nobody holds.
//
// Slot claims. While there is a backlog — the previous claim through this
// Store came back full — and neither ordering nor a destination filter is
// in use, a claim first takes the oldest due events of one slot of the
// pending set (migration 005: rows grouped 64 by insertion order, dealt
// round 16 slots, a sequence handing the slots out in turn), and tops the
// batch up from the whole pending set if the slot had too few. Claimers
// sharing a table then rarely walk the same rows: without slots, every
// claim steps over all the rows the others hold leased at the head of the
// pending index, which made four relays on a 2-core database slower than
// one (docs/BENCHMARKS.md). The cost is order: under a backlog a batch
// holds the oldest due events of its slot, which may be up to about
// 16 batches younger than the oldest due event overall. A short batch still
// means nothing more is due, and with Config.Ordering, per-aggregate order
// is unaffected (slots are not used).
func (s *Store) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	q, err := s.claimQuery(ctx, req)
	if err != nil {
		return core.Batch{}, err
	}
	b, dead, err := s.runClaim(ctx, q, nil)
	if err != nil {
		return core.Batch{}, err
	}
	return s.topUp(ctx, q, b, dead), nil
}

// runClaim runs claim q and reads its batch. Should the claim fail once it
// may have reached the server, what it leased is given back (abandon), all
// but the events in keep, which the caller already holds under the same
// token.
func (s *Store) runClaim(ctx context.Context, q claim, keep []core.ID) (core.Batch, int, error) {
	b, dead, err := s.queryClaim(ctx, q)
	if err != nil {
		s.abandon(ctx, q, keep, err)
		return core.Batch{}, 0, err
	}
	return b, dead, nil
}

// queryClaim runs claim q and reads its batch. On a pgx pool it holds
// one connection for the statement and its rows, and gives it back before
// returning, so that a give-back (abandon) finds one free.
func (s *Store) queryClaim(ctx context.Context, q claim) (core.Batch, int, error) {
	query := s.db.Query
	if s.pool != nil {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return core.Batch{}, 0, wrap("claim", err) // nothing was sent
		}
		defer conn.Release()
		query = conn.Query
	}
	rows, err := query(ctx, q.sql, s.relayArgs(q.args)...)
	if err != nil {
		return core.Batch{}, 0, wrap("claim", err)
	}
	return s.read(ctx, q, rows) // its errors say "claim" already
}

// read is q.read, noting how far the table's history reaches and where
// the next claim starts (claimfloor.go), and logging the rows the claim
// dead-lettered. It returns how many those were.
func (s *Store) read(ctx context.Context, q claim, rows pgx.Rows) (core.Batch, int, error) {
	b, dead, fl, err := q.read(rows)
	s.plans.floor.saw(q.floor, fl.at, fl.pos)
	if err != nil {
		return b, 0, err
	}
	refs, _ := b.Lease.Handle.(*rowRefs)
	s.sawPositions(refs)
	if len(dead) > 0 {
		s.cfg.Logger.WarnContext(ctx, "outbox claim dead-lettered events whose attempts count is at its limit; fix the writer, then replay them",
			"schema", s.n.schema, "table", s.n.table, "events", len(dead), "event_ids", dead)
	}
	return b, len(dead), nil
}

// claim is a prepared claim: its SQL, arguments, the lease token it sets
// and the floor it starts from.
type claim struct {
	sql   string
	args  []any
	token core.ID
	limit int
	slot  bool // sql is the slot claim
	part  bool // sql is the partitioned layout's (layout.go)
	floor floorArgs
}

// claimQuery prepares the claim req asks for. It may search for the
// floor first (Store.floorArgs), which is a round trip of its own.
func (s *Store) claimQuery(ctx context.Context, req core.ClaimRequest) (claim, error) {
	if req.Limit < 1 {
		return claim{}, fmt.Errorf("outboxkit/postgres: claim: Limit is %d; it must be at least 1", req.Limit)
	}
	if req.LeaseFor <= 0 {
		return claim{}, fmt.Errorf("outboxkit/postgres: claim: LeaseFor is %v; it must be positive", req.LeaseFor)
	}
	token := core.NewID()
	fl := s.floorArgs(ctx)
	q := claim{token: token, limit: req.Limit, floor: fl, part: s.partitioned(),
		args: []any{optionalTime(req.Now), req.Limit, pgtype.UUID{Bytes: token, Valid: true}, req.LeaseFor, fl.at, fl.pos}}
	switch {
	case req.Destination != "":
		q.args = append(q.args, req.Destination)
	case !s.cfg.Ordering && s.backlog.Load():
		q.slot = true
	}
	q.sql = s.claimText(q.part, q.slot, req.Destination != "", fl.created)
	if q.part {
		q.args = append(q.args, fl.created.floor, fl.created.ceiling) // createdfloor.go
	}
	return q, nil
}

// claimText is the claim statement for a layout and kind; on the
// partitioned layout, for the created_at range created.
func (s *Store) claimText(partitioned, slot, byDestination bool, created createdRange) string {
	if one := s.oneClaims(created); partitioned && one != nil {
		switch {
		case byDestination:
			return one.claimDest
		case slot:
			return one.claimSlot
		}
		return one.claim
	}
	switch {
	case partitioned && byDestination:
		return s.partStmts().claimDest
	case partitioned && slot:
		return s.partStmts().claimSlot
	case partitioned:
		return s.partStmts().claim
	case byDestination:
		return s.claimDestSQL
	case slot:
		return s.claimSlotSQL
	}
	return s.claimSQL
}

// foundFloor is the floor a claim statement found for the next claim.
type foundFloor struct {
	at  pgtype.Timestamptz // not Valid if the statement returned no row
	pos int64
}

// read turns the claim's RETURNING rows into a batch, closing rows. Rows
// the claim dead-lettered (unleasable) are left out; their IDs come back
// beside the batch, and the floor the statement found (claimSQL) with them.
//
// It scans each row straight into the batch's slice: events are large, and
// a relay at full speed reads tens of thousands a second, so copying them
// (and the garbage collector's write barriers on every copied pointer)
// shows in its profile.
func (q claim) read(rows pgx.Rows) (core.Batch, []core.ID, foundFloor, error) {
	defer rows.Close()
	events := make([]core.Event, 0, q.limit)
	keys := make([]claimKey, 0, q.limit)
	var until time.Time
	var sc eventScanner
	var dst []any
	var deadLettered bool
	var dead []core.ID
	var fl foundFloor
	var created pgtype.Timestamptz // as stored, infinities kept: the settlement's bounds
	bounds := createdBounds{part: q.part}
	for rows.Next() {
		events = append(events, core.Event{})
		keys = append(keys, claimKey{i: len(keys)})
		e, k := &events[len(events)-1], &keys[len(keys)-1]
		var leaseUntil pgtype.Timestamptz
		dst = append(sc.appendDests(dst[:0], e), &leaseUntil, &k.pos, &k.tid, &deadLettered, &fl.at, &fl.pos)
		if q.part {
			dst = append(dst, &created)
		}
		if err := rows.Scan(dst...); err != nil {
			return core.Batch{}, nil, foundFloor{}, wrap("claim: read event", err)
		}
		if deadLettered {
			dead = append(dead, sc.id.Bytes)
			events, keys = events[:len(events)-1], keys[:len(keys)-1]
			continue
		}
		until = leaseUntil.Time
		sc.finish(e)
		k.avail = e.AvailableAt
		if q.part {
			bounds.add(created)
		}
	}
	if err := rows.Err(); err != nil {
		return core.Batch{}, nil, foundFloor{}, wrap("claim", err)
	}
	// RETURNING order is unspecified (with the TID scan it is the rows'
	// physical order); restore the claim order. Sorting here rather than
	// in SQL keeps the work off the database, and a backlog written in
	// order usually comes back in order, which costs one pass to see.
	if !slices.IsSortedFunc(keys, claimKey.compare) {
		slices.SortFunc(keys, claimKey.compare)
		sorted := make([]core.Event, len(events))
		for j, k := range keys {
			sorted[j] = events[k.i]
		}
		events = sorted
	}
	refs := &rowRefs{ids: make([]core.ID, len(events)), tids: make([]pgtype.TID, len(events)), pos: make([]int64, len(events)), created: bounds}
	for j := range events {
		refs.ids[j], refs.tids[j], refs.pos[j] = events[j].ID, keys[j].tid, keys[j].pos
	}
	return core.Batch{Lease: core.Lease{Token: q.token, Until: until, Handle: refs}, Events: events, PayloadsAreJSON: true}, dead, fl, nil
}

// claimKey is what the claim order and the settlement need of a claimed
// row besides its event: i is its index in RETURNING order.
type claimKey struct {
	avail time.Time
	pos   int64
	tid   pgtype.TID
	i     int
}

func (a claimKey) compare(b claimKey) int {
	if c := a.avail.Compare(b.avail); c != 0 {
		return c
	}
	return cmpInt64(a.pos, b.pos)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
