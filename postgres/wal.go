package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The WAL wake-up: a logical replication stream of the outbox table's
// inserts, through the built-in pgoutput plugin, on a temporary slot.
//
// Why a stream: it wakes relays at every commit that inserted events,
// whoever wrote them (Add, plain SQL from another language), and costs
// writers nothing, whereas NOTIFY in the writer's transaction serialises
// the commits of every notifying transaction. The stream only wakes: the
// table stays the truth, and the relay claims from it as always.
//
// Why a temporary slot: it is dropped when its connection ends, however it
// ends, so a relay that dies leaves no slot retaining WAL. It is also why
// nothing is ever replayed: each connection starts from the present, and
// the wake-up after connecting covers what was written meanwhile.

const (
	// statusDelay is how long after the last confirmed position a new one
	// is confirmed while messages arrive. The slot retains WAL from its
	// confirmed position, so confirming every tenth of a second keeps it
	// from holding more than that much, for ten tiny messages a second
	// however busy the table.
	statusDelay = 100 * time.Millisecond
	// statusIdle is how often an idle stream confirms anyway, well within
	// the server's wal_sender_timeout (60 s by default), so a quiet relay
	// is not taken for a dead one. The server also asks when it needs an
	// answer sooner (a keepalive with reply requested), which is answered
	// at once.
	statusIdle = 10 * time.Second

	// busyRate, busyFor and busyPause: a stream that announced at least
	// busyRate commits a second for busyFor closes and stays closed for
	// busyPause (errStreamBusy). The WAL sender decodes every change of
	// the database to find the outbox's inserts (measured: ~38 µs of
	// PostgreSQL CPU per business transaction of an INSERT and one event,
	// against ~200 µs for the transaction itself), and at such rates the
	// relay needs no announcements: its polls keep finding events, so it
	// keeps polling fast (core.RelayConfig.MinPollInterval). When the
	// writers stop, polling backs off, and the stream is back within
	// busyPause to wake the relay for the next event.
	busyRate  = 2000
	busyFor   = time.Second
	busyPause = 10 * time.Second
)

// costlyRate, costlyFor and costlyPause: a stream whose WAL sender has
// gone through costlyRate bytes of WAL a second for costlyFor closes and
// stays closed for costlyPause (walCostlyError). Decoding costs the
// server CPU in proportion to the database's WAL, whichever tables write
// it: measured ~3 µs per KiB, so a quarter of a core per relay while
// another job wrote 79 MiB/s, with no outbox event at all. 16 MiB/s is
// about 5 % of a core; past it the relay polls (its latency then grows to
// at most an eighth of its idle time, PollInterval at worst).
const (
	costlyRate  = 16 << 20
	costlyFor   = 5 * time.Second
	costlyPause = time.Minute
)

// busyLimits are the busy and costly thresholds, which tests lower.
type busyLimits struct {
	rate        float64
	span, pause time.Duration

	walRate           float64 // bytes a second
	walSpan, walPause time.Duration
}

var defaultBusy = busyLimits{
	rate: busyRate, span: busyFor, pause: busyPause,
	walRate: costlyRate, walSpan: costlyFor, walPause: costlyPause,
}

// walCostlyError ends a stream whose decoding costs more than it is worth
// (costlyRate).
type walCostlyError struct{ bytesPerSecond float64 }

func (e *walCostlyError) Error() string {
	return fmt.Sprintf("the WAL stream paused: the database writes %.0f MiB of WAL a second, which every relay's stream decodes", e.bytesPerSecond/(1<<20))
}

// errStreamBusy ends a stream that events keep busy (busyRate).
var errStreamBusy = errors.New("the WAL stream paused: events flow without it")

// streamOnce opens a replication connection, checks that the stream can
// work (walUnavailableError if not), creates a temporary slot, and wakes
// at every commit that inserted into the outbox table, until ctx is done
// or the connection fails. connected is called once the stream runs.
func (s *Store) streamOnce(ctx context.Context, wake, connected func()) error {
	cfg := s.wakeups.conn.Config.Copy()
	// replication=database opens a logical WAL sender on the database,
	// which also runs plain SQL (simple protocol only).
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return classifyStreamError(s.n, cfg.User, 0, err)
	}
	defer closeQuietly(ctx, conn.Close)

	version, err := s.checkStream(ctx, conn, cfg.User)
	if err != nil {
		return err
	}
	slot := s.wakeups.nextSlot()
	// NOEXPORT_SNAPSHOT: nothing is copied, so no snapshot is needed.
	// Creating a logical slot waits until the transactions running at
	// that moment have ended (on a busy server up to the next
	// running-transactions record, ~15 s): polling covers the wait.
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	})
	if err != nil {
		return classifyStreamError(s.n, cfg.User, version, fmt.Errorf("create temporary replication slot: %w", err))
	}
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: pgoutputArgs(s.n, version),
	})
	if err != nil {
		return classifyStreamError(s.n, cfg.User, version, fmt.Errorf("start replication: %w", err))
	}
	connected()
	// Events may have been written while no stream ran.
	wake()
	return follow(ctx, conn, wake, s.wakeups.busy)
}

// pgoutputArgs are the plugin's options: the publication and, from
// PostgreSQL 14, protocol 2 with streaming, so that a large transaction
// on any table is passed through as it is decoded (and its changes to
// other tables dropped) instead of spilled to disk under the slot until
// it commits.
func pgoutputArgs(n names, version int) []string {
	pub := pgx.Identifier{publicationName(n.schema, n.table)}.Sanitize()
	args := []string{"publication_names " + quoteLiteral(pub)}
	if version >= 140000 {
		return append([]string{"proto_version '2'"}, append(args, "streaming 'on'")...)
	}
	return append([]string{"proto_version '1'"}, args...)
}

// checkStream reads, over the replication connection, what the stream
// needs: wal_level = logical and a publication of the table's inserts. It
// returns the server's version (server_version_num).
func (s *Store) checkStream(ctx context.Context, conn *pgconn.PgConn, user string) (int, error) {
	pub := publicationName(s.n.schema, s.n.table)
	// The WAL sender runs only the simple protocol: the values are quoted
	// literals, of validated identifiers.
	q := "SELECT current_setting('server_version_num'), current_setting('wal_level')," +
		" coalesce((SELECT pubinsert FROM pg_publication WHERE pubname = " + quoteLiteral(pub) + ")::text, 'missing')," +
		" EXISTS (SELECT FROM pg_publication_tables WHERE pubname = " + quoteLiteral(pub) +
		" AND schemaname = " + quoteLiteral(s.n.schema) + " AND tablename = " + quoteLiteral(s.n.table) + ")"
	res, err := conn.Exec(ctx, q).ReadAll()
	if err != nil {
		return 0, classifyStreamError(s.n, user, 0, fmt.Errorf("check the replication settings: %w", err))
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 4 {
		return 0, fmt.Errorf("check the replication settings: unexpected result")
	}
	row := res[0].Rows[0]
	version, _ := strconv.Atoi(string(row[0]))
	walLevel, insert, hasTable := string(row[1]), string(row[2]), string(row[3]) == "t"
	switch {
	case walLevel != "logical":
		return version, &walUnavailableError{
			Reason: "the server runs with wal_level = " + walLevel,
			Fix:    "run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL",
		}
	case insert == "missing" || !hasTable || insert != "true":
		what := "publication " + pgx.Identifier{pub}.Sanitize() + " does not exist"
		if insert != "missing" {
			what = "publication " + pgx.Identifier{pub}.Sanitize() + " does not publish the inserts of " + s.n.outbox
		}
		return version, &walUnavailableError{
			Reason: what,
			Fix: "run the migrations as the table's owner with CREATE on the database, or have that role run " +
				createPublicationSQL(s.n, version),
		}
	}
	return version, nil
}

// follow reads the stream until ctx is done or the connection fails,
// waking at every commit that inserted into the table and confirming what
// it received, so the slot holds back no WAL.
func follow(ctx context.Context, conn *pgconn.PgConn, wake func(), limits busyLimits) error {
	var (
		received  pglogrepl.LSN // the end of what the server sent
		confirmed pglogrepl.LSN
		tx        txTracker
		nextAt    = time.Now().Add(statusIdle)
		busy      = busyMeter{limits: limits}
		costly    = walMeter{limits: limits}
	)
	for {
		if !time.Now().Before(nextAt) {
			// Everything received is confirmed: the stream only wakes, so
			// nothing is left to process, and the slot may move on.
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: received}); err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
			confirmed = received
			nextAt = time.Now().Add(statusIdle)
		}
		rctx, cancel := context.WithDeadline(ctx, nextAt)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue // time to confirm
			}
			return fmt.Errorf("receive from the replication stream: %w", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("parse keepalive: %w", err)
				}
				// A keepalive's position is what the sender has sent: all
				// of it has arrived.
				received = max(received, ka.ServerWALEnd)
				if err := costly.at(time.Now(), received); err != nil {
					return err
				}
				if ka.ReplyRequested {
					nextAt = time.Now()
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("parse WAL data: %w", err)
				}
				// The message's own position, not the server's WAL end,
				// which may be ahead of what was sent.
				received = max(received, xld.WALStart)
				if err := costly.at(time.Now(), received); err != nil {
					return err
				}
				if tx.commits(xld.WALData) {
					wake()
					if busy.commit(time.Now()) {
						return errStreamBusy
					}
				}
			}
			if soon := time.Now().Add(statusDelay); received > confirmed && soon.Before(nextAt) {
				nextAt = soon
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		}
	}
}

// busyMeter tells when commits have arrived at busyRate or more for
// busyFor, measured over windows of a second.
type busyMeter struct {
	limits   busyLimits
	windowAt time.Time // start of the current window
	commits  int       // in the current window
	since    time.Time // start of the run of busy windows; zero for none
}

// commit counts a commit arriving at now and reports whether the stream
// has been busy for busyFor.
func (b *busyMeter) commit(now time.Time) bool {
	b.commits++
	d := now.Sub(b.windowAt)
	if d < time.Second {
		return false
	}
	switch {
	case d >= 2*time.Second || float64(b.commits) < b.limits.rate*d.Seconds():
		b.since = time.Time{} // a quiet window, or a gap
	case b.since.IsZero():
		b.since = b.windowAt
	}
	b.windowAt, b.commits = now, 0
	return !b.since.IsZero() && now.Sub(b.since) >= b.limits.span
}

// walMeter tells when the WAL sender has gone through WAL at walRate or
// more for walSpan.
type walMeter struct {
	limits   busyLimits
	windowAt time.Time
	from     pglogrepl.LSN
}

// at records that the stream had reached pos at now.
func (m *walMeter) at(now time.Time, pos pglogrepl.LSN) error {
	if m.windowAt.IsZero() || pos < m.from {
		m.windowAt, m.from = now, pos
		return nil
	}
	d := now.Sub(m.windowAt)
	if d < m.limits.walSpan {
		return nil
	}
	rate := float64(pos-m.from) / d.Seconds()
	m.windowAt, m.from = now, pos
	if rate >= m.limits.walRate {
		return &walCostlyError{bytesPerSecond: rate}
	}
	return nil
}

// txTracker follows pgoutput's messages to tell the commits that inserted
// into the table (it publishes inserts only, but sends the begin and
// commit of other transactions on some versions) from the others.
type txTracker struct {
	// inserted: the transaction being sent whole (between begin and
	// commit) inserted a row.
	inserted bool
	// A large transaction is streamed in chunks (stream start, changes,
	// stream stop), interleaved with others, before its stream commit:
	// streamed is the transaction of the open chunk (0: none), and
	// streamedInserts the transactions whose chunks inserted.
	streamed        uint32
	streamedInserts map[uint32]bool
}

// commits reads one pgoutput message and reports whether it is the commit
// of a transaction that inserted into the table.
func (t *txTracker) commits(m []byte) bool {
	if len(m) == 0 {
		return false
	}
	xid := func() uint32 {
		if len(m) < 5 {
			return 0
		}
		return binary.BigEndian.Uint32(m[1:5])
	}
	switch pglogrepl.MessageType(m[0]) {
	case pglogrepl.MessageTypeBegin:
		t.inserted = false
	case pglogrepl.MessageTypeInsert:
		if t.streamed != 0 {
			if t.streamedInserts == nil {
				t.streamedInserts = map[uint32]bool{}
			}
			t.streamedInserts[t.streamed] = true
		} else {
			t.inserted = true
		}
	case pglogrepl.MessageTypeCommit:
		ins := t.inserted
		t.inserted = false
		return ins
	case pglogrepl.MessageTypeStreamStart:
		t.streamed = xid()
	case pglogrepl.MessageTypeStreamStop:
		t.streamed = 0
	case pglogrepl.MessageTypeStreamCommit:
		x := xid()
		ins := t.streamedInserts[x]
		delete(t.streamedInserts, x)
		return ins
	case pglogrepl.MessageTypeStreamAbort:
		// Transaction and subtransaction IDs: when they are equal the
		// whole transaction aborted. A subtransaction's abort keeps the
		// mark; at worst a wake-up finds nothing.
		if len(m) >= 9 && binary.BigEndian.Uint32(m[1:5]) == binary.BigEndian.Uint32(m[5:9]) {
			delete(t.streamedInserts, xid())
		}
	}
	return false
}
