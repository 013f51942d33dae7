package postgres

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenBackoffMin is the first reconnection delay; it doubles up to
// Config.ListenBackoffMax.
const listenBackoffMin = 100 * time.Millisecond

// Listen implements core.Notifier: it calls wake whenever a writer notifies
// that it may have added events (Add's statement, or Notify after a commit),
// until ctx is done, and then returns ctx.Err().
//
// It LISTENs on a dedicated connection opened with the pool's connection
// settings but outside the pool, so it takes no slot from claims and a
// connection in LISTEN state never returns to the pool. When the connection
// fails it reconnects with capped exponential backoff and calls wake after
// every successful (re)connection, because notifications sent while it was
// disconnected are lost. Notifications are hints: the relay's polling covers
// anything missed.
//
// With NotifyOff it opens no connection and just waits for ctx. The other
// two modes listen alike: relays need not know how writers notify.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	if s.cfg.Notify == NotifyOff {
		<-ctx.Done()
		return ctx.Err()
	}
	backoff := listenBackoffMin
	for {
		err := s.listenOnce(ctx, wake, func() { backoff = listenBackoffMin })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Spread reconnections by ±20% so relays that lost the server
		// together do not return together.
		d := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		s.cfg.Logger.WarnContext(ctx, "outbox listener disconnected; reconnecting",
			"channel", s.cfg.Channel, "error", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, max(s.cfg.ListenBackoffMax, listenBackoffMin))
	}
}

// listenOnce connects, LISTENs and forwards notifications until the
// connection or ctx fails. connected is called once LISTEN succeeded.
func (s *Store) listenOnce(ctx context.Context, wake, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer func() {
		// ctx may be done already; closing politely must not hang on a
		// dead server.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
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
