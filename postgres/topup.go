package postgres

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Topping up: a claim that came back short although more may be due (a
// slot claim whose slot had too few events, or a claim that dead-lettered
// rows) claims the rest under the same lease token, and the two batches
// are merged into one in claim order.

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
		rest.slot, rest.sql = false, s.claimText(q.part, false, false, q.floor.created)
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
	// A claim that returned no rows read no expiry (it is zero): the
	// other one's stands. A slot claim that found nothing then topped up
	// from the whole set returned batches whose Lease.Until was zero.
	if len(a.Events) == 0 || !b.Lease.Until.IsZero() && b.Lease.Until.Before(out.Lease.Until) {
		out.Lease.Until = b.Lease.Until
	}
	refs := &rowRefs{ids: make([]core.ID, len(rows)), tids: make([]pgtype.TID, len(rows)), pos: make([]int64, len(rows))}
	for i, r := range rows {
		out.Events[i] = r.ev
		refs.ids[i], refs.tids[i], refs.pos[i] = r.ev.ID, r.tid, r.pos
	}
	refs.created = ra.created.union(rb.created)
	out.Lease.Handle = refs
	return out
}
