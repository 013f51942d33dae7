package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
)

// maxErrorBytes bounds the publish error text kept in last_error: a
// transport may return a whole HTTP body, and every retry rewrites the row.
const maxErrorBytes = 4096

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
	q, err := s.claimQuery(req)
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
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return core.Batch{}, 0, wrap("claim", err) // nothing was sent
	}
	rows, err := conn.Query(ctx, q.sql, s.relayArgs(q.args)...)
	var b core.Batch
	var dead int
	if err != nil {
		err = wrap("claim", err)
	} else {
		b, dead, err = s.read(ctx, q, rows) // its errors say "claim" already
	}
	conn.Release()
	if err != nil {
		s.abandon(ctx, q, keep, err)
		return core.Batch{}, 0, err
	}
	return b, dead, nil
}

// read is q.read, noting how far the table's history reaches and logging
// the rows the claim dead-lettered. It returns how many those were.
func (s *Store) read(ctx context.Context, q claim, rows pgx.Rows) (core.Batch, int, error) {
	b, dead, err := q.read(rows)
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

// topUp records whether claim q came back full (counting the rows it
// dead-lettered) and claims the rest of the batch under the same lease
// token when q came back short although more may be due: a slot claim whose
// slot had too few events claims from the whole pending set, and a claim
// that spent part of its limit on rows it dead-lettered claims again. So a
// short batch still means nothing more was due. Should that second claim
// fail, the first one's events are returned alone: they are leased
// already, whatever the second one leased is given back (runClaim), and
// the next claim looks again.
func (s *Store) topUp(ctx context.Context, q claim, b core.Batch, dead int) core.Batch {
	if len(b.Events) == q.limit || !q.slot && dead == 0 {
		s.backlog.Store(len(b.Events)+dead == q.limit)
		return b
	}
	rest := q
	if q.slot {
		rest.slot, rest.sql = false, s.claimSQL
	}
	rest.limit = q.limit - len(b.Events)
	rest.args = append([]any(nil), q.args...)
	rest.args[1] = rest.limit
	more, moreDead, err := s.runClaim(ctx, rest, b.Lease.Handle.(*rowRefs).ids)
	if err != nil {
		s.backlog.Store(false)
		return b
	}
	s.backlog.Store(len(more.Events)+moreDead == rest.limit)
	if len(more.Events) == 0 {
		return b
	}
	return mergeBatches(b, more)
}

// mergeBatches joins two claims made under one token into one batch in
// claim order. The lease's expiry is the earlier one.
func mergeBatches(a, b core.Batch) core.Batch {
	ra, rb := a.Lease.Handle.(*rowRefs), b.Lease.Handle.(*rowRefs)
	type row struct {
		ev  core.Event
		pos int64
		tid pgtype.TID
	}
	rows := make([]row, 0, len(a.Events)+len(b.Events))
	for i, e := range a.Events {
		rows = append(rows, row{e, ra.pos[i], ra.tids[i]})
	}
	for i, e := range b.Events {
		rows = append(rows, row{e, rb.pos[i], rb.tids[i]})
	}
	slices.SortFunc(rows, func(x, y row) int {
		return claimKey{avail: x.ev.AvailableAt, pos: x.pos}.compare(claimKey{avail: y.ev.AvailableAt, pos: y.pos})
	})
	out := core.Batch{Lease: a.Lease, Events: make([]core.Event, len(rows)), PayloadsAreJSON: a.PayloadsAreJSON && b.PayloadsAreJSON}
	refs := &rowRefs{ids: make([]core.ID, len(rows)), tids: make([]pgtype.TID, len(rows)), pos: make([]int64, len(rows))}
	for i, r := range rows {
		out.Events[i] = r.ev
		refs.ids[i], refs.tids[i], refs.pos[i] = r.ev.ID, r.tid, r.pos
	}
	out.Lease.Handle = refs
	return out
}

// claim is a prepared claim: its SQL, arguments and the lease token it sets.
type claim struct {
	sql   string
	args  []any
	token core.ID
	limit int
	slot  bool // sql is the slot claim
}

func (s *Store) claimQuery(req core.ClaimRequest) (claim, error) {
	if req.Limit < 1 {
		return claim{}, fmt.Errorf("outboxkit/postgres: claim: Limit is %d; it must be at least 1", req.Limit)
	}
	if req.LeaseFor <= 0 {
		return claim{}, fmt.Errorf("outboxkit/postgres: claim: LeaseFor is %v; it must be positive", req.LeaseFor)
	}
	token := core.NewID()
	q := claim{sql: s.claimSQL, token: token, limit: req.Limit,
		args: []any{optionalTime(req.Now), req.Limit, pgtype.UUID{Bytes: token, Valid: true}, req.LeaseFor}}
	switch {
	case req.Destination != "":
		q.sql = s.claimDestSQL
		q.args = append(q.args, req.Destination)
	case !s.cfg.Ordering && s.backlog.Load():
		q.sql, q.slot = s.claimSlotSQL, true
	}
	return q, nil
}

// read turns the claim's RETURNING rows into a batch, closing rows. Rows
// the claim dead-lettered (unleasable) are left out; their IDs come back
// beside the batch.
//
// It scans each row straight into the batch's slice: events are large, and
// a relay at full speed reads tens of thousands a second, so copying them
// (and the garbage collector's write barriers on every copied pointer)
// shows in its profile.
func (q claim) read(rows pgx.Rows) (core.Batch, []core.ID, error) {
	defer rows.Close()
	events := make([]core.Event, 0, q.limit)
	keys := make([]claimKey, 0, q.limit)
	var until time.Time
	var sc eventScanner
	var dst []any
	var deadLettered bool
	var dead []core.ID
	for rows.Next() {
		events = append(events, core.Event{})
		keys = append(keys, claimKey{i: len(keys)})
		e, k := &events[len(events)-1], &keys[len(keys)-1]
		var leaseUntil pgtype.Timestamptz
		dst = append(sc.appendDests(dst[:0], e), &leaseUntil, &k.pos, &k.tid, &deadLettered)
		if err := rows.Scan(dst...); err != nil {
			return core.Batch{}, nil, wrap("claim: read event", err)
		}
		if deadLettered {
			dead = append(dead, sc.id.Bytes)
			events, keys = events[:len(events)-1], keys[:len(keys)-1]
			continue
		}
		until = leaseUntil.Time
		sc.finish(e)
		k.avail = e.AvailableAt
	}
	if err := rows.Err(); err != nil {
		return core.Batch{}, nil, wrap("claim", err)
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
	refs := &rowRefs{ids: make([]core.ID, len(events)), tids: make([]pgtype.TID, len(events)), pos: make([]int64, len(events))}
	for j := range events {
		refs.ids[j], refs.tids[j], refs.pos[j] = events[j].ID, keys[j].tid, keys[j].pos
	}
	return core.Batch{Lease: core.Lease{Token: q.token, Until: until, Handle: refs}, Events: events, PayloadsAreJSON: true}, dead, nil
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

// rowRefs is the Lease.Handle of a claim: the row address of each claimed
// event, in claim order, so Settle can find the rows by TID scan (and its
// insertion position, so two claims under one token can be merged in
// order).
type rowRefs struct {
	ids  []core.ID
	tids []pgtype.TID
	pos  []int64
}

// addresses returns the row address of every outcome's event, in outcome
// order, or nil when the handle is not this store's or misses one of them
// (the settlement then goes by ID). Relays settle in claim order, so the
// common case is a straight comparison; anything else falls back to a map.
func (r *rowRefs) addresses(outcomes []core.Outcome) []pgtype.TID {
	if r == nil {
		return nil
	}
	tids := make([]pgtype.TID, len(outcomes))
	inOrder := len(outcomes) <= len(r.ids)
	for i := 0; inOrder && i < len(outcomes); i++ {
		inOrder = outcomes[i].ID == r.ids[i]
		tids[i] = r.tids[i]
	}
	if inOrder {
		return tids
	}
	at := make(map[core.ID]pgtype.TID, len(r.ids))
	for i, id := range r.ids {
		at[id] = r.tids[i]
	}
	for i, o := range outcomes {
		tid, ok := at[o.ID]
		if !ok {
			return nil
		}
		tids[i] = tid
	}
	return tids
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

// Settle records the outcome of each event of one lease in one statement,
// touching only rows whose lease token is still req.Lease.Token:
//
//   - Published: published_at = now, lease cleared (or, with
//     Config.DeletePublished, the row deleted).
//   - Retry: available_at = now + Delay, last_error = Error, lease cleared.
//   - DeadLettered: dead_at = now, last_error = Error, lease cleared.
//   - Released: lease cleared and Attempts given back; the event is due at
//     once (its available_at had already passed when it was claimed).
//   - Deferred: as Retry, with Attempts given back as for Released.
//
// Events whose token no longer matches (the lease expired and another relay
// claimed them, or an operator replayed them) are left alone and reported in
// a *core.LeaseLostError after the rest are settled. An expired lease that
// nobody took over still settles: refusing it would only cause a duplicate
// publish.
//
// Error texts are made valid UTF-8 without NUL (which text columns cannot
// hold; each invalid byte becomes U+FFFD) and then cut to at most 4 KiB at a
// character boundary.
func (s *Store) Settle(ctx context.Context, req core.SettleRequest) error {
	q, err := s.settleQuery(req)
	if err != nil || q.sql == "" {
		return err
	}
	rows, err := s.pool.Query(ctx, q.sql, s.relayArgs(q.args)...)
	if err != nil {
		return wrap("settle", err)
	}
	return s.settleUnmatched(ctx, q, req, q.read(rows, req))
}

// settleUnmatched finishes a settlement by row address: the rows it did not
// match are settled again by ID, whose answer is final. A leased row keeps
// its address unless something rewrote the table (VACUUM FULL, CLUSTER, a
// restore) or the lease was lost, so this is almost never a round trip.
func (s *Store) settleUnmatched(ctx context.Context, q settlement, req core.SettleRequest, err error) error {
	var lost *core.LeaseLostError
	if !q.byTID || !errors.As(err, &lost) {
		return err
	}
	rest := make([]core.Outcome, 0, len(lost.IDs))
	missing := make(map[core.ID]struct{}, len(lost.IDs))
	for _, id := range lost.IDs {
		missing[id] = struct{}{}
	}
	for _, o := range req.Outcomes {
		if _, ok := missing[o.ID]; ok {
			rest = append(rest, o)
		}
	}
	return s.Settle(ctx, core.SettleRequest{Lease: core.Lease{Token: req.Lease.Token, Until: req.Lease.Until}, Outcomes: rest, Now: req.Now})
}

// settlement is a prepared settle: its SQL and arguments, and the IDs it
// must see come back. An empty sql means there is nothing to settle.
type settlement struct {
	sql   string
	args  []any
	seen  map[core.ID]struct{}
	byTID bool // rows are found by the addresses in the lease's handle
}

func (s *Store) settleQuery(req core.SettleRequest) (settlement, error) {
	if len(req.Outcomes) == 0 {
		return settlement{}, nil
	}
	if req.Lease.Token.IsZero() {
		return settlement{}, fmt.Errorf("outboxkit/postgres: settle: the lease token is zero: pass the Lease from Claim")
	}
	n := len(req.Outcomes)
	ids := make([]pgtype.UUID, n)
	seen := make(map[core.ID]struct{}, n)
	allPublished := true
	for i, o := range req.Outcomes {
		if _, dup := seen[o.ID]; dup {
			return settlement{}, fmt.Errorf("outboxkit/postgres: settle: event %s has two outcomes", o.ID)
		}
		seen[o.ID] = struct{}{}
		ids[i] = pgtype.UUID{Bytes: o.ID, Valid: true}
		if o.Kind != core.Published {
			allPublished = false
		}
	}
	token := pgtype.UUID{Bytes: req.Lease.Token, Valid: true}
	now := optionalTime(req.Now)
	refs, _ := req.Lease.Handle.(*rowRefs)
	tids := refs.addresses(req.Outcomes)

	q := settlement{seen: seen, byTID: tids != nil}
	switch {
	case allPublished && s.cfg.DeletePublished && q.byTID:
		q.sql, q.args = s.byTID.delete, []any{token, tids, ids}
	case allPublished && s.cfg.DeletePublished:
		q.sql, q.args = s.deleteSQL, []any{token, ids}
	case allPublished && q.byTID:
		q.sql, q.args = s.byTID.publish, []any{token, now, tids, ids}
	case allPublished:
		q.sql, q.args = s.publishSQL, []any{token, now, ids}
	default:
		var published []pgtype.UUID
		var publishedTIDs, otherTIDs []pgtype.TID
		others := ids
		if s.cfg.DeletePublished {
			others = make([]pgtype.UUID, 0, n)
		}
		kinds := make([]int32, 0, n)
		errs := make([]string, 0, n)
		delays := make([]int64, 0, n)
		for i, o := range req.Outcomes {
			var kind int32
			var delay int64
			switch o.Kind {
			case core.Published:
				kind = kindPublished
			case core.Retry:
				kind = kindRetry
				delay = max(o.Delay, 0).Microseconds()
			case core.DeadLettered:
				kind = kindDead
			case core.Released:
				kind = kindReleased
			case core.Deferred:
				kind = kindDeferred
				delay = max(o.Delay, 0).Microseconds()
			default:
				return settlement{}, fmt.Errorf("outboxkit/postgres: settle: event %s has unknown outcome kind %d", o.ID, int(o.Kind))
			}
			if s.cfg.DeletePublished {
				if kind == kindPublished {
					published = append(published, ids[i])
					if q.byTID {
						publishedTIDs = append(publishedTIDs, tids[i])
					}
					continue
				}
				others = append(others, ids[i])
				if q.byTID {
					otherTIDs = append(otherTIDs, tids[i])
				}
			}
			kinds = append(kinds, kind)
			errs = append(errs, cleanErrorText(o.Error))
			delays = append(delays, delay)
		}
		switch {
		case s.cfg.DeletePublished && q.byTID:
			q.sql, q.args = s.byTID.settleDelete, []any{token, now, others, kinds, errs, delays, publishedTIDs, otherTIDs, published}
		case s.cfg.DeletePublished:
			q.sql, q.args = s.settleDeleteSQL, []any{token, now, others, kinds, errs, delays, published}
		case q.byTID:
			q.sql, q.args = s.byTID.settle, []any{token, now, ids, kinds, errs, delays, tids}
		default:
			q.sql, q.args = s.settleSQL, []any{token, now, ids, kinds, errs, delays}
		}
	}
	return q, nil
}

// read consumes the settle's RETURNING ids and reports the events whose
// lease token no longer matched.
func (q settlement) read(rows pgx.Rows, req core.SettleRequest) error {
	var id pgtype.UUID
	_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		delete(q.seen, core.ID(id.Bytes))
		return nil
	})
	if err != nil {
		return wrap("settle", err)
	}
	if len(q.seen) == 0 {
		return nil
	}
	lost := make([]core.ID, 0, len(q.seen))
	for _, o := range req.Outcomes { // keep the caller's order
		if _, ok := q.seen[o.ID]; ok {
			lost = append(lost, o.ID)
		}
	}
	return &core.LeaseLostError{IDs: lost}
}

// SettleAndClaim implements core.SettleClaimer: the settle of one batch and
// the claim of the next travel in one pipelined round trip (a pgx batch),
// which at high throughput saves a large share of the time per batch. The
// two statements run in one implicit transaction, so either both take effect
// or, when the server refuses the round trip, neither does; when it fails on
// the client's side (ctx cancelled, connection lost) it may have committed,
// and what the claim leased is given back, as for Claim. (While the table is
// young, see plans.go, they are two round trips: the claim runs only after
// the settlement succeeded.)
func (s *Store) SettleAndClaim(ctx context.Context, sreq core.SettleRequest, creq core.ClaimRequest) (core.Batch, error, error) {
	if s.planning() {
		// A pgx batch always runs prepared statements (plans.go): while
		// the table is young, settle and claim in two round trips.
		settleErr := s.Settle(ctx, sreq)
		if settleErr != nil && !errors.Is(settleErr, core.ErrLeaseLost) {
			// As when the pipelined round trip fails: nothing claimed.
			return core.Batch{}, settleErr, settleErr
		}
		b, claimErr := s.Claim(ctx, creq)
		return b, settleErr, claimErr
	}
	sq, err := s.settleQuery(sreq)
	if err != nil {
		return core.Batch{}, err, err
	}
	cq, err := s.claimQuery(creq)
	if err != nil {
		return core.Batch{}, s.Settle(ctx, sreq), err
	}
	if sq.sql == "" {
		b, err := s.Claim(ctx, creq)
		return b, nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		err = wrap("settle and claim", err) // nothing was sent
		return core.Batch{}, err, err
	}
	batch, dead, settleErr, claimErr, err := s.pipelined(ctx, conn, sq, sreq, cq)
	conn.Release()
	switch {
	case err != nil:
		// The round trip failed as a whole: its transaction rolled back,
		// or, if the failure was the client's, its outcome is unknown and
		// the claim's rows may be leased under a token the caller never
		// gets.
		s.abandon(ctx, cq, nil, err)
		err = wrap("settle and claim", err)
		return core.Batch{}, err, err
	case claimErr != nil:
		// Committed, but the batch could not be read.
		s.abandon(ctx, cq, nil, claimErr)
		return core.Batch{}, s.settleUnmatched(ctx, sq, sreq, settleErr), wrap("settle and claim", claimErr)
	}
	return s.topUp(ctx, cq, batch, dead), s.settleUnmatched(ctx, sq, sreq, settleErr), nil
}

// pipelined is SettleAndClaim's round trip on conn. err is
// set when the round trip failed as a whole; otherwise settleErr is nil or
// a lease lost, and claimErr says whether the claimed batch could be read.
func (s *Store) pipelined(ctx context.Context, conn *pgxpool.Conn, sq settlement, sreq core.SettleRequest, cq claim) (batch core.Batch, dead int, settleErr, claimErr, err error) {
	var b pgx.Batch
	b.Queue(sq.sql, sq.args...)
	b.Queue(cq.sql, cq.args...)
	br := conn.SendBatch(ctx, &b)
	rows, err := br.Query()
	if err != nil {
		return core.Batch{}, 0, nil, nil, errors.Join(err, br.Close())
	}
	settleErr = sq.read(rows, sreq)
	if settleErr != nil && !errors.Is(settleErr, core.ErrLeaseLost) {
		return core.Batch{}, 0, nil, nil, errors.Join(settleErr, br.Close())
	}
	rows, err = br.Query()
	if err != nil {
		return core.Batch{}, 0, nil, nil, errors.Join(err, br.Close())
	}
	batch, dead, claimErr = s.read(ctx, cq, rows)
	// Close reads the end of the implicit transaction: an error there
	// means it did not commit, or that whether it did is unknown.
	if err := br.Close(); err != nil {
		return core.Batch{}, 0, nil, nil, errors.Join(claimErr, err)
	}
	return batch, dead, settleErr, claimErr, nil
}

// cleanErrorText makes a publish error storable in a text column: valid
// UTF-8 without NUL, then at most maxErrorBytes, cut at a rune boundary.
// Cleaning comes first because it changes the length: an invalid byte
// becomes a three-byte U+FFFD, and a NUL disappears.
func cleanErrorText(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) > maxErrorBytes {
		cut := maxErrorBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// eventScanner reads the eventColumns of a row into a core.Event. Its scratch
// fields are reused across rows.
type eventScanner struct {
	id             pgtype.UUID
	version        int32
	seq            pgtype.Int8
	headers        []byte
	att            int32
	created, avail pgtype.Timestamptz
}

func (sc *eventScanner) dests(e *core.Event) []any { return sc.appendDests(nil, e) }

// appendDests is dests appending to dst, so a loop can reuse one slice.
func (sc *eventScanner) appendDests(dst []any, e *core.Event) []any {
	return append(dst, &sc.id, &e.Type, &sc.version, &e.Source, &e.AggregateType, &e.AggregateID, &sc.seq,
		(*[]byte)(&e.Payload), &sc.headers, &e.Destination, &sc.created, &sc.avail, &sc.att)
}

func (sc *eventScanner) finish(e *core.Event) {
	e.ID = sc.id.Bytes
	e.SchemaVersion = int(sc.version)
	if sc.seq.Valid {
		e.Sequence = sc.seq.Int64
	}
	e.Attempts = int(sc.att)
	e.Headers = decodeHeaders(sc.headers)
	e.CreatedAt = finiteTime(sc.created)
	e.AvailableAt = finiteTime(sc.avail)
}

// finiteTime reads a timestamptz that may be 'infinity' or '-infinity',
// which a plain-SQL writer can store and time.Time cannot hold, as the zero
// time ("unknown"). Failing the scan instead would fail every claim that
// includes the row, after the claim had leased it: the row would stay the
// oldest due and stall the relay for good.
func finiteTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}

// decodeHeaders reads the headers column. It never fails: a row written by
// another service with non-string values keeps them as their JSON text, so
// one odd row cannot stop the relay.
func decodeHeaders(b []byte) map[string]string {
	if len(b) <= 2 { // "{}" (the column is checked to hold an object)
		return nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err == nil {
		return h
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil
	}
	h = make(map[string]string, len(raw))
	for k, v := range raw {
		var str string
		if json.Unmarshal(v, &str) == nil {
			h[k] = str
		} else {
			h[k] = string(v)
		}
	}
	return h
}
