package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// A claim is one autocommitted statement, and its lease token is made
// here, not by the database. When the call fails after the statement may
// have reached the server (a context cancelled in flight, a connection
// lost while the reply was read), the server may well have committed it:
// pgx gives up on the connection, not on the statement. Its rows would
// then stay leased under a token nobody holds until the lease expires. So
// the store gives back whatever is still leased under the token, as if
// released: lease cleared, the attempt not charged, due at once.

// abandonTimeout bounds the give-back. It runs under a context detached
// from the caller's, which is typically the one that was cancelled.
const abandonTimeout = 5 * time.Second

// abandon gives back the rows claim q leased that its caller does not
// hold (all of them but keep) after the claim failed with cause, unless
// cause shows the statement never ran. It logs, and otherwise ignores, a
// failure to give them back: they are claimable again once the lease
// expires.
func (s *Store) abandon(ctx context.Context, q claim, keep []core.ID, cause error) {
	if !mayHaveRun(cause) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	token := pgtype.UUID{Bytes: q.token, Valid: true}
	ids := make([]pgtype.UUID, len(keep))
	for i, id := range keep {
		ids[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	// One round trip, one implicit transaction: the lock first, so the
	// update (a statement of its own, with a snapshot taken after the lock
	// was granted) sees the claim's rows if it committed.
	var b pgx.Batch
	b.Queue(leaseLockSQL, token)
	b.Queue(s.releaseSQL, token, q.args[0], q.limit, ids)
	if err := s.db.SendBatch(ctx, &b).Close(); err != nil {
		s.cfg.Logger.WarnContext(ctx, "outbox claim failed after reaching the database, and what it may have leased could not be given back; those events are claimable again when the lease expires",
			"schema", s.n.schema, "table", s.n.table, "claim_error", cause, "error", err)
	}
}

// mayHaveRun reports whether a statement that failed with err may have
// run, and committed, on the server: not when pgx knows nothing was sent
// (pgconn.SafeToRetry), nor when the server answered with an error (the
// statement, and the implicit transaction it ran in, rolled back).
func mayHaveRun(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && !pgconn.SafeToRetry(err) && !errors.As(err, &pgErr)
}
