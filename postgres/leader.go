package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// lease is one named row of <schema>.outboxkit_leases (migration 009):
// whoever holds an unexpired row is the one process that runs the task it
// names. Taking, renewing and handing back the row are one statement
// each, and every time in them is the database's now(), so leadership
// works through PgBouncer in transaction mode (a session advisory lock
// would be lost, or leaked, between transactions) and whatever the
// processes' clocks say. Only durations cross between the database's
// clock and the process's, measured on the process's monotonic clock.
type lease struct {
	db     conns
	name   string
	holder string
	dur    time.Duration

	acquireSQL, renewSQL, releaseSQL string
}

// leaseTerm is what one statement on the lease row learned.
type leaseTerm struct {
	// held: this holder holds the lease now.
	held bool
	// holder is the holder the row names (this one when held; "" when
	// there is no row).
	holder string
	// remaining is how long that holder's lease has left, by the
	// database's clock (negative once expired).
	remaining time.Duration
	// safeUntil, when held, is the process's time before which the lease
	// has certainly not expired, less a margin for a statement in flight to
	// be cancelled: the database's now() for the statement came after it
	// was sent, so the lease lasts at least dur from then.
	safeUntil time.Time
}

// leaseMargin is how long before its lease could expire a holder that
// failed to renew stops: a tenth of the lease, time for a statement in
// flight to be cancelled.
func leaseMargin(dur time.Duration) time.Duration { return dur / 10 }

func newLease(db conns, n names, name, holder string, dur time.Duration) *lease {
	t := leasesTable(n)
	return &lease{
		db: db, name: name, holder: holder, dur: dur,
		// Taken when it is free or expired, or already ours (a restarted
		// process with a stable Holder); otherwise the second branch
		// reports who holds it and for how long, so followers can try
		// again when it expires. acquired_at changes only when the lease
		// changes hands.
		acquireSQL: `WITH won AS (
    INSERT INTO ` + t + ` AS l (name, holder, acquired_at, until)
    VALUES ($1, $2, now(), now() + $3::int8 * interval '1 microsecond')
    ON CONFLICT (name) DO UPDATE
    SET holder = excluded.holder,
        acquired_at = CASE WHEN l.holder = excluded.holder AND l.until > now() THEN l.acquired_at ELSE now() END,
        until = excluded.until
    WHERE l.until <= now() OR l.holder = excluded.holder
    RETURNING l.holder, l.until
)
SELECT true, holder, (extract(epoch FROM until - now()) * 1000000)::int8 FROM won
UNION ALL
SELECT false, holder, (extract(epoch FROM until - now()) * 1000000)::int8 FROM ` + t + `
WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM won)`,
		// Only an unexpired lease is renewed: once it expired, another
		// process may have taken it, and the holder must campaign again.
		renewSQL: `UPDATE ` + t + ` SET until = now() + $3::int8 * interval '1 microsecond'
WHERE name = $1 AND holder = $2 AND until > now()
RETURNING (extract(epoch FROM until - now()) * 1000000)::int8`,
		releaseSQL: `UPDATE ` + t + ` SET until = now() WHERE name = $1 AND holder = $2 AND until > now()`,
	}
}

// leasesTable is the schema's lease table, shared by its outbox tables.
func leasesTable(n names) string { return pgx.Identifier{n.schema, "outboxkit_leases"}.Sanitize() }

// acquire takes the lease if it is free, expired or already this
// holder's, and otherwise says who holds it.
func (l *lease) acquire(ctx context.Context) (leaseTerm, error) {
	sent := time.Now()
	var (
		t  leaseTerm
		us int64
	)
	err := l.db.QueryRow(ctx, l.acquireSQL, l.name, l.holder, l.dur.Microseconds()).Scan(&t.held, &t.holder, &us)
	if errors.Is(err, pgx.ErrNoRows) {
		// The row was deleted between the two branches' snapshots (a
		// down migration): nobody holds it; try again.
		return leaseTerm{}, nil
	}
	if err != nil {
		return leaseTerm{}, wrap("take the lease "+l.name, err)
	}
	t.remaining = time.Duration(us) * time.Microsecond
	if t.held {
		t.safeUntil = sent.Add(l.dur - leaseMargin(l.dur))
	}
	return t, nil
}

// renew extends this holder's unexpired lease by dur from the
// database's now(); held is false when the lease expired or changed hands.
func (l *lease) renew(ctx context.Context) (leaseTerm, error) {
	sent := time.Now()
	var us int64
	err := l.db.QueryRow(ctx, l.renewSQL, l.name, l.holder, l.dur.Microseconds()).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) {
		return leaseTerm{}, nil
	}
	if err != nil {
		return leaseTerm{}, wrap("renew the lease "+l.name, err)
	}
	return leaseTerm{held: true, holder: l.holder, remaining: time.Duration(us) * time.Microsecond,
		safeUntil: sent.Add(l.dur - leaseMargin(l.dur))}, nil
}

// release hands the lease back (it expires now), so another process takes
// over at its next attempt instead of waiting for the expiry.
func (l *lease) release(ctx context.Context) error {
	_, err := l.db.Exec(ctx, l.releaseSQL, l.name, l.holder)
	return wrap("release the lease "+l.name, err)
}
