package postgres

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Wake-ups behind a pooler.
//
// A replication connection cannot pass PgBouncer, and LISTEN through
// PgBouncer in transaction mode succeeds and then hears nothing: the
// session that listens is a server connection PgBouncer lends to the next
// client's transaction. A relay whose wake-up connection goes there would
// believe it listens and wait for its poll every time. So before its
// first wake-up connection, a store whose wake-ups take the pool's
// settings (no Config.WakeupURL) checks where they go: detectProxy
// (pooler.go) first, and where it sees a proxy, whether a NOTIFY reaches
// a LISTEN made through it (listenProbe). The probe is the judge: a
// Kubernetes Service or a Docker port passes it, as does PgBouncer in
// session mode, and their relays stream or listen as usual. Only when the
// notification does not arrive does the store stop relying on LISTEN:
// it says so once and relays poll, as with WakeupPoll, until they are
// given a WakeupURL past the pooler.

// listenProbeWait is how long the probe waits for its notification. A
// direct connection delivers it in about a round trip; past that much
// longer wait, LISTEN is not worth having.
const listenProbeWait = 2 * time.Second

// pooledWakeupsMsg is the warning of a store whose wake-ups would go
// through a pooler.
const pooledWakeupsMsg = "outbox wake-ups go through a connection pooler that does not keep LISTEN (PgBouncer in transaction mode) and cannot carry the WAL stream: relays find events by polling. Set Config.WakeupURL (outboxctl relay --wakeup-url, OUTBOX_WAKEUP_URL) to PostgreSQL itself, past the pooler, for wake-ups at each commit"

// noConnectionMsg is the note of a store with no connection settings of
// its own (a database/sql handle) and no Config.WakeupURL.
const noConnectionMsg = "outbox wake-ups off: a store on a database/sql handle has no LISTEN or replication connection of its own, so relays find events by polling. Set Config.WakeupURL (outboxctl relay --wakeup-url, OUTBOX_WAKEUP_URL) to give it one, or Wakeup to WakeupPoll to say polling is meant"

// checkPooler tells whether the store's wake-up connection goes through a
// pooler that loses LISTEN; when it does, it says so (at warn level once
// per Store, then at debug level). An error is a failed connection, which
// Listen retries as any other.
func (s *Store) checkPooler(ctx context.Context) (bool, error) {
	conn, err := pgconn.ConnectConfig(ctx, s.wakeups.conn.Config.Copy())
	if err != nil {
		return false, err
	}
	v, err := detectProxy(ctx, conn)
	closeQuietly(ctx, conn.Close)
	if err != nil || !v.Proxied {
		return false, err
	}
	heard, err := s.listenProbe(ctx)
	if err != nil || heard {
		if err == nil {
			s.cfg.Logger.DebugContext(ctx, "outbox wake-up connection goes through a proxy that keeps LISTEN", "table", s.n.outbox, "seen", v.Why)
		}
		return false, err
	}
	// Said once per Store at warn level: every Listen checks again, and
	// would otherwise repeat the same advice.
	level := slog.LevelDebug
	if s.wakeups.poolerWarned.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	s.cfg.Logger.Log(ctx, level, pooledWakeupsMsg, "table", s.n.outbox, "seen", v.Why)
	return true, nil
}

// listenProbe LISTENs on a channel of its own through the wake-up
// settings, NOTIFYs it over a second connection made the same way, and
// reports whether the notification arrived within listenProbeWait. Both
// run on the simple protocol, which any pooler passes. The channel is
// new each time: through PgBouncer the LISTEN stays behind on a server
// connection, and must never hear anything else.
func (s *Store) listenProbe(ctx context.Context) (bool, error) {
	var b [8]byte
	_, _ = crand.Read(b[:])
	channel := pgx.Identifier{"outboxkit_probe_" + hex.EncodeToString(b[:])}.Sanitize()

	listener, err := pgconn.ConnectConfig(ctx, s.listenProbeConfig())
	if err != nil {
		return false, err
	}
	defer closeQuietly(ctx, listener.Close)
	if _, err := listener.Exec(ctx, "LISTEN "+channel).ReadAll(); err != nil {
		return false, err
	}
	notifier, err := pgconn.ConnectConfig(ctx, s.listenProbeConfig())
	if err != nil {
		return false, err
	}
	_, err = notifier.Exec(ctx, "NOTIFY "+channel).ReadAll()
	closeQuietly(ctx, notifier.Close)
	if err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(ctx, listenProbeWait)
	defer cancel()
	err = listener.WaitForNotification(wctx)
	switch {
	case err == nil:
		_, _ = listener.Exec(ctx, "UNLISTEN "+channel).ReadAll()
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err):
		return false, nil
	}
	return false, err
}

// listenProbeConfig is the wake-up settings, for one probe connection.
func (s *Store) listenProbeConfig() *pgconn.Config {
	return s.wakeups.conn.Config.Copy()
}

// noteNoConnection says, once per Store at warn level, that a store
// without connection settings of its own does not wake relays.
func (s *Store) noteNoConnection(ctx context.Context) {
	level := slog.LevelDebug
	if s.wakeups.noConnNoted.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	s.cfg.Logger.Log(ctx, level, noConnectionMsg, "table", s.n.outbox)
}
