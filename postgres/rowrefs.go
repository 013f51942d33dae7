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
