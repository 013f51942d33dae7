package main

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Prototypes of proposed changes to postgres/ and core/, measured beside
// the real thing with -proposals. They are not products: each exists to put
// a number on a proposal in docs/BENCHMARKS.md.

// synchronous_commit=off on the relay's connections (asyncCommit): the
// claim and the settlement then return without waiting for their WAL flush.
// Visibility is unchanged (other relays see a lease as soon as it commits),
// so leases and fencing work as before. What changes is durability across
// a PostgreSQL crash: a lease or an outcome committed in the last few
// hundred milliseconds before the crash may be lost, and those events are
// published again (a lost lease) or retried (a lost outcome). That is
// within at-least-once delivery, but it is more redelivery after a database
// crash, so it is a decision for the maintainers, not a default; the
// business transactions (Add) are not affected.

// notifyMode is how a writer's wake-up reaches the relays.
type notifyMode int

const (
	// notifyInTx is the store's default: Add's statement calls pg_notify
	// inside the caller's transaction.
	notifyInTx notifyMode = iota
	// notifyOff sends nothing (Config.DisableNotify); relays poll.
	notifyOff
	// notifyAfterCommit (proposal): Add sends nothing; after COMMIT the
	// writer sends pg_notify in a transaction of its own.
	notifyAfterCommit
	// notifyCoalesced (proposal): like notifyAfterCommit, but the writer
	// only signals a per-process notifier, which keeps at most one
	// pg_notify in flight on its own connection and sends one more if
	// signalled meanwhile.
	notifyCoalesced
)

// Why after COMMIT: PostgreSQL serialises the commits of all transactions
// that issued NOTIFY (PreCommit_Notify takes a database-wide lock and keeps
// it until the commit record is flushed), so an in-transaction NOTIFY
// turns group commit into one WAL flush per writer transaction. A
// transaction that only notifies writes no WAL before its commit record,
// so it commits without waiting for a flush and holds that lock for
// microseconds. The wake-up stays a hint: it is sent after the event is
// visible, so a relay that wakes finds it; a writer that dies between
// COMMIT and the notification leaves the event to the relay's poll.

// newAfterCommit returns what a writer calls after each COMMIT in mode, and
// the function that stops it.
func newAfterCommit(ctx context.Context, pool *pgxpool.Pool, dsn string, mode notifyMode, channel string) (func(context.Context) error, func(), error) {
	switch mode {
	case notifyAfterCommit:
		return func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "SELECT pg_notify($1, '')", channel)
			return err
		}, func() {}, nil
	case notifyCoalesced:
		n, err := newCoalescingNotifier(ctx, dsn, channel)
		if err != nil {
			return nil, nil, err
		}
		return func(context.Context) error { n.signal(); return nil }, n.stop, nil
	}
	return func(context.Context) error { return nil }, func() {}, nil
}

// coalescingNotifier sends pg_notify on its own connection, at most one at a
// time: signals that arrive while one is in flight cause exactly one more.
// Every commit that signalled is followed by a notification sent after it.
type coalescingNotifier struct {
	pool    *pgxpool.Pool
	channel string
	kick    chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newCoalescingNotifier(ctx context.Context, dsn, channel string) (*coalescingNotifier, error) {
	pool, err := newPool(ctx, dsn, 1)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n := &coalescingNotifier{pool: pool, channel: channel, kick: make(chan struct{}, 1), cancel: cancel}
	n.wg.Add(1)
	go n.run(ctx)
	return n, nil
}

func (n *coalescingNotifier) signal() {
	select {
	case n.kick <- struct{}{}:
	default: // one is already pending; it will be sent after this commit
	}
}

func (n *coalescingNotifier) run(ctx context.Context) {
	defer n.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
			// A failed hint is not retried: the relays' poll covers it.
			_, _ = n.pool.Exec(ctx, "SELECT pg_notify($1, '')", n.channel)
		}
	}
}

func (n *coalescingNotifier) stop() {
	n.cancel()
	n.wg.Wait()
	n.pool.Close()
}
