package postgres

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
)

// wakeupBackoffMin is the first reconnection delay of the wake-up
// connection; it doubles up to Config.ListenBackoffMax.
const wakeupBackoffMin = 100 * time.Millisecond

// wakeupState is what the wake-up connections of one Store share.
type wakeupState struct {
	// conn is the wake-up connection's configuration: Config.WakeupURL's,
	// or the pool's; nil for a store on a database/sql handle without
	// WakeupURL, which has no connection settings to take.
	conn *pgx.ConnConfig
	// own: conn is Config.WakeupURL's, which the operator chose for the
	// wake-ups; the pool's are checked for a pooler first
	// (wakeup_pooler.go).
	own bool
	// slotPrefix starts the names of the store's temporary replication
	// slots ("outboxkit_<8 random hex digits>_"), so that an operator, or
	// a test, can tell them apart from others'; slots counts them.
	slotPrefix string
	slots      atomic.Uint64
	// warned is set once the store has said that the WAL stream is
	// unavailable: the warning is given once per Store, however often the
	// fallback happens again (at every reconnection).
	warned atomic.Bool
	// costlyWarned: the same, for a stream paused because decoding the
	// database's WAL costs too much (wal.go, costlyRate).
	costlyWarned atomic.Bool
	// poolerWarned and noConnNoted: the same, for wake-ups that would go
	// through a pooler, and for a store with no connection settings
	// (wakeup_pooler.go).
	poolerWarned, noConnNoted atomic.Bool
	// busy says when a stream pauses (wal.go, busyRate).
	busy busyLimits
}

// newWakeupState reads the wake-up connection's settings: WakeupURL's,
// or pool's, which is nil for a store on a database/sql handle.
func newWakeupState(pool *pgxpool.Pool, c Config) (*wakeupState, error) {
	var conn *pgx.ConnConfig
	switch {
	case c.WakeupURL != "":
		var err error
		if conn, err = pgx.ParseConfig(c.WakeupURL); err != nil {
			return nil, &core.ConfigError{Field: "WakeupURL", Reason: "cannot be parsed (" + err.Error() + "): give a postgres:// URL or key=value connection string"}
		}
	case pool != nil:
		conn = pool.Config().ConnConfig
	}
	var b [4]byte
	_, _ = crand.Read(b[:])
	return &wakeupState{conn: conn, own: c.WakeupURL != "", slotPrefix: "outboxkit_" + hex.EncodeToString(b[:]) + "_", busy: defaultBusy}, nil
}

// nextSlot names a new temporary slot: unique within the store, and
// across stores by the random prefix.
func (w *wakeupState) nextSlot() string {
	return w.slotPrefix + strconv.FormatUint(w.slots.Add(1), 10)
}

// wakeupMode is the mode Listen runs in: NotifyOff, kept from before
// Config.Wakeup existed, also means "open no connection".
func (s *Store) wakeupMode() WakeupMode {
	if s.cfg.Notify == NotifyOff {
		return WakeupPoll
	}
	return s.cfg.Wakeup
}

// Listen implements core.Notifier: it calls wake whenever events may have
// been written, until ctx is done, and then returns ctx.Err().
//
// With WakeupAuto (the default) it streams the outbox table's inserts
// over a logical replication connection (wal.go) and wakes the relay at
// each commit that inserted into the table, whoever the writer: writers
// need send nothing. Where the stream is unavailable (wal_level is not
// logical, the role lacks REPLICATION, the publication is missing, the
// server is out of WAL senders or slots, the connection goes through
// PgBouncer), it says so once in the log, with what would enable it, and
// LISTENs instead, hearing writers that notify; the relay's adaptive
// polling finds the rest. Each reconnection tries the stream again, so a
// server restarted with wal_level = logical is streamed from without
// restarting the relay. With WakeupListen it only LISTENs.
//
// The connection is dedicated, opened with Config.WakeupURL or the pool's
// settings but outside the pool, so it takes no slot from claims. When it
// fails, Listen reconnects with capped exponential backoff and calls wake
// after every (re)connection, because what was written while it was
// disconnected was not announced. Wake-ups are hints: the relay's polling
// covers anything missed.
//
// Without Config.WakeupURL, the wake-up connection takes the pool's
// settings, and Listen first checks that they do not lead through a
// pooler that loses LISTEN (PgBouncer in transaction mode,
// wakeup_pooler.go). If they do, it says once in the log that relays poll
// and that WakeupURL would wake them, and then behaves as WakeupPoll. A
// store on a database/sql handle has no settings to take: without
// WakeupURL it says so once and behaves as WakeupPoll too.
//
// With WakeupPoll, or NotifyOff, it opens no connection and just waits for
// ctx.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	mode := s.wakeupMode()
	if mode != WakeupPoll && s.wakeups.conn == nil {
		s.noteNoConnection(ctx)
		mode = WakeupPoll
	}
	if mode == WakeupPoll {
		<-ctx.Done()
		return ctx.Err()
	}
	backoff := wakeupBackoffMin
	connected := func() { backoff = wakeupBackoffMin }
	checked := s.wakeups.own
	for {
		via, err := "stream", error(nil)
		if !checked {
			var pooled bool
			if pooled, err = s.checkPooler(ctx); err == nil {
				if pooled {
					<-ctx.Done()
					return ctx.Err()
				}
				checked = true
				continue
			}
			via = "pooler check"
		} else if mode == WakeupAuto {
			err = s.streamOnce(ctx, wake, connected)
			if un := (*walUnavailableError)(nil); errors.As(err, &un) && ctx.Err() == nil {
				s.noteFallback(ctx, un)
				via, err = "listen", s.listenOnce(ctx, wake, connected)
			}
		} else {
			via, err = "listen", s.listenOnce(ctx, wake, connected)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var costly *walCostlyError
		if pause := s.wakeups.busy.pause; errors.Is(err, errStreamBusy) || errors.As(err, &costly) {
			if costly != nil {
				pause = s.wakeups.busy.walPause
				// Said once per store at warn level: an operator who sees
				// relays poll should learn why.
				level := slog.LevelDebug
				if s.wakeups.costlyWarned.CompareAndSwap(false, true) {
					level = slog.LevelWarn
				}
				s.cfg.Logger.Log(ctx, level, "outbox WAL wake-ups paused: decoding the database's WAL would cost more than polling; relays poll meanwhile",
					"table", s.n.outbox, "reason", costly.Error(), "for", pause)
			} else {
				s.cfg.Logger.DebugContext(ctx, "outbox WAL stream paused while events flow; the relay polls", "table", s.n.outbox, "for", pause)
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			continue
		}
		// Spread reconnections by ±20% so relays that lost the server
		// together do not return together.
		d := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		s.cfg.Logger.WarnContext(ctx, "outbox wake-up connection lost; reconnecting (polling meanwhile)",
			"via", via, "channel", s.cfg.Channel, "error", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, max(s.cfg.ListenBackoffMax, wakeupBackoffMin))
	}
}

// closeQuietly closes a wake-up connection: ctx may be done already, and
// closing politely must not hang on a dead server.
func closeQuietly(ctx context.Context, close func(context.Context) error) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = close(closeCtx)
}
