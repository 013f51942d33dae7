package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
)

// The settle-and-claim pipeline: one batch's settlement and the next
// batch's claim in one round trip, built from settle.go's and claim.go's
// statements.

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
	if s.pool == nil || s.planning() {
		// A pgx batch always runs prepared statements (plans.go): while
		// the table is young, settle and claim in two round trips; and
		// database/sql cannot pipeline at all.
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
	cq, err := s.claimQuery(ctx, creq)
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
