package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// listenOnce connects, LISTENs on the store's channel and forwards
// notifications until the connection or ctx fails. connected is called
// once LISTEN succeeded. It is Listen's wake-up with WakeupListen, and
// WakeupAuto's where the WAL stream is unavailable (wakeup.go): it hears
// the writers that notify (NotifyInTransaction, NotifyAfterCommit, and
// anyone's SELECT pg_notify on the channel).
//
// LISTEN needs a session of its own: a connection through PgBouncer in
// transaction mode cannot hold one, hence Config.WakeupURL.
func (s *Store) listenOnce(ctx context.Context, wake, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.wakeups.conn)
	if err != nil {
		return err
	}
	defer closeQuietly(ctx, conn.Close)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.cfg.Channel}.Sanitize()); err != nil {
		return err
	}
	connected()
	// Events may have been written while no listener was connected.
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
