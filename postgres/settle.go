package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// Settling: Settle, the settlement it prepares from a batch's outcomes,
// the reading of which rows it matched, and the retry by ID of events not
// found at their claimed address. The SQL is in settle_sql.go.

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
	rows, err := s.db.Query(ctx, q.sql, s.relayArgs(q.args)...)
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
	// The statements of the table's layout (layout.go): by address, those
	// of the claim's, which a partitioned claim's bounds say; by ID, the
	// store's.
	byTID, byID := s.byTID, s.settleTexts()
	var bounds []any
	if q.byTID && refs.created.lo.Valid {
		byTID, bounds = s.partStmts().byTID, []any{refs.created.lo, refs.created.hi}
		if one := s.oneSettles(refs.created); one != nil {
			byTID = *one
		}
	}
	switch {
	case allPublished && s.cfg.DeletePublished && q.byTID:
		q.sql, q.args = byTID.delete, append([]any{token, tids, ids}, bounds...)
	case allPublished && s.cfg.DeletePublished:
		q.sql, q.args = byID.delete, []any{token, ids}
	case allPublished && q.byTID:
		q.sql, q.args = byTID.publish, append([]any{token, now, tids, ids}, bounds...)
	case allPublished:
		q.sql, q.args = byID.publish, []any{token, now, ids}
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
			q.sql, q.args = byTID.settleDelete, append([]any{token, now, others, kinds, errs, delays, publishedTIDs, otherTIDs, published}, bounds...)
		case s.cfg.DeletePublished:
			q.sql, q.args = byID.settleDelete, []any{token, now, others, kinds, errs, delays, published}
		case q.byTID:
			q.sql, q.args = byTID.settle, append([]any{token, now, ids, kinds, errs, delays, tids}, bounds...)
		default:
			q.sql, q.args = byID.settle, []any{token, now, ids, kinds, errs, delays}
		}
	}
	return q, nil
}

// settleTexts is the settlements by ID for the table's layout.
func (s *Store) settleTexts() tidSQL {
	if s.partitioned() {
		return tidSQL{settle: s.partStmts().settle, publish: s.partStmts().publish, delete: s.partStmts().delete, settleDelete: s.partStmts().settleDelete}
	}
	return tidSQL{settle: s.settleSQL, publish: s.publishSQL, delete: s.deleteSQL, settleDelete: s.settleDeleteSQL}
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
