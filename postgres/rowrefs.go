package postgres

import (
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Row references: the lease handle a claim returns, which lets Settle
// find the claimed rows by address (settle_sql.go says why an address is
// only a hint).

// rowRefs is the Lease.Handle of a claim: the row address of each claimed
// event, in claim order, so Settle can find the rows by TID scan (and its
// insertion position, so two claims under one token can be merged in
// order).
type rowRefs struct {
	ids  []core.ID
	tids []pgtype.TID
	pos  []int64
	// created bounds the rows' created_at on the partitioned layout
	// (claimPartitioned): a settlement by address searches only the
	// partitions within them (createdWithin). Not set by a plain claim.
	created createdBounds
}

// createdBounds are the least and greatest of a lease's created_at values,
// as stored (a foreign writer's infinities included).
type createdBounds struct {
	lo, hi pgtype.Timestamptz // Valid once a value was added
	// part: read from a partitioned layout's claim (which may have
	// claimed nothing).
	part bool
}

func (b *createdBounds) add(t pgtype.Timestamptz) {
	if !t.Valid {
		return
	}
	if !b.lo.Valid || compareTimestamptz(t, b.lo) < 0 {
		b.lo = t
	}
	if !b.hi.Valid || compareTimestamptz(t, b.hi) > 0 {
		b.hi = t
	}
}

// union is the bounds of both claims' rows, or none when either was the
// plain layout's (a settlement then cannot keep to some partitions).
func (b createdBounds) union(o createdBounds) createdBounds {
	switch {
	case !b.part || !o.part:
		return createdBounds{}
	case !b.lo.Valid:
		return o
	case !o.lo.Valid:
		return b
	}
	b.add(o.lo)
	b.add(o.hi)
	return b
}

// compareTimestamptz orders timestamps as PostgreSQL does: -infinity,
// finite times, infinity.
func compareTimestamptz(a, b pgtype.Timestamptz) int {
	if c := cmpInt64(int64(a.InfinityModifier), int64(b.InfinityModifier)); c != 0 || a.InfinityModifier != pgtype.Finite {
		return c
	}
	return a.Time.Compare(b.Time)
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
