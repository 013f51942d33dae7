package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// streamStart bounds how long a WAL stream may take to start: creating a
// logical slot waits for the transactions running at that moment, and on
// a server busy with other test packages up to the next
// running-transactions record (every 15 s).
const streamStart = 90 * time.Second

// wakeLog runs s.Listen until the test ends and counts its wake-ups.
type wakeLog struct {
	n atomic.Int64
}

func runListen(t *testing.T, s *postgres.Store) *wakeLog {
	t.Helper()
	w := &wakeLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { w.n.Add(1) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	})
	return w
}

// waitMore waits for a wake-up beyond the first n.
func (w *wakeLog) waitMore(t *testing.T, n int64, timeout time.Duration, what string) {
	t.Helper()
	waitFor(t, timeout, what, func() bool { return w.n.Load() > n })
}

// replSlot is a row of pg_replication_slots.
type replSlot struct {
	name      string
	temporary bool
	pid       int32 // 0 when no connection holds it
}

// slotsWithPrefix lists the slots whose names start with prefix.
func slotsWithPrefix(t *testing.T, pool *pgxpool.Pool, prefix string) []replSlot {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT slot_name, temporary, coalesce(active_pid, 0) FROM pg_replication_slots WHERE starts_with(slot_name, $1) ORDER BY slot_name`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []replSlot
	for rows.Next() {
		var s replSlot
		if err := rows.Scan(&s.name, &s.temporary, &s.pid); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// activeSlot waits for the store's one active slot and returns it.
func activeSlot(t *testing.T, pool *pgxpool.Pool, s *postgres.Store, not string) replSlot {
	t.Helper()
	var got replSlot
	waitFor(t, streamStart, "the store's WAL stream to start", func() bool {
		for _, sl := range slotsWithPrefix(t, pool, s.WakeupSlotPrefixForTest()) {
			if sl.pid != 0 && sl.name != not {
				got = sl
				return true
			}
		}
		return false
	})
	if !got.temporary {
		t.Fatalf("slot %s is not temporary: a dead relay's slot would retain WAL", got.name)
	}
	return got
}

// streamingStore is newStore for tests of the stream itself: its cost
// guard is off, since other test packages may write WAL fast enough on
// the shared server to pause it (costlyRate).
func streamingStore(t *testing.T, db testDB, cfg postgres.Config) *postgres.Store {
	t.Helper()
	s := newStore(t, db, cfg)
	s.SetWALCostLimitsForTest(math.Inf(1), time.Minute, time.Second)
	return s
}

// plainInsert writes an event as a service in another language would:
// plain SQL, no notification.
func plainInsert(t *testing.T, pool *pgxpool.Pool, schema string) core.ID {
	t.Helper()
	id := core.NewID()
	if _, err := pool.Exec(ctxT(t), `INSERT INTO `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+
		` (id, event_type, payload) VALUES ($1, 'plain', '{}')`, id.String()); err != nil {
		t.Fatal(err)
	}
	return id
}

func terminate(t *testing.T, pool *pgxpool.Pool, pid int32) {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(ctxT(t), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend %d: %v, %v", pid, ok, err)
	}
}

// With the default configuration a relay wakes from the WAL stream at
// each commit that inserted into the table, even one written in plain SQL
// with no notification, and LISTENs on nothing.
func TestWALWakesRelayOnPlainInsert(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := streamingStore(t, db, postgres.Config{})
	pub := memory.NewPublisher()
	// An hour's poll: only the stream can deliver the events in time.
	runRelay(t, s, pub, core.RelayConfig{PollInterval: time.Hour})
	activeSlot(t, db.pool, s, "")
	ctx := ctxT(t)
	for i := range 3 {
		plainInsert(t, db.pool, db.schema)
		if err := pub.WaitFor(ctx, i+1); err != nil {
			t.Fatalf("event %d, inserted in plain SQL, not delivered: %v", i, err)
		}
	}
	// Through Add with the default NotifyNone too.
	if err := addTx(ctx, s, db.pool, mustEvent(t, "added", 1)); err != nil {
		t.Fatal(err)
	}
	if err := pub.WaitFor(ctx, 4); err != nil {
		t.Fatalf("event written by Add not delivered: %v", err)
	}
	if pid := listenerPID(t, db.pool, s.Config().Channel); pid != 0 {
		t.Fatalf("a LISTEN (backend %d) runs beside the WAL stream", pid)
	}
}

// Only commits that inserted wake: a rolled-back insert and changes to
// other tables do not.
func TestWALWakesOnlyForCommittedInserts(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	s := streamingStore(t, db, postgres.Config{})
	w := runListen(t, s)
	activeSlot(t, db.pool, s, "")
	w.waitMore(t, 0, streamStart, "the wake-up after the stream starts")
	ctx := ctxT(t)
	other := pgx.Identifier{db.schema, "other"}.Sanitize()
	if _, err := db.pool.Exec(ctx, "CREATE TABLE "+other+" (n int)"); err != nil {
		t.Fatal(err)
	}
	before := w.n.Load()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, tx, mustEvent(t, "rolled.back", 1)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, "INSERT INTO "+other+" VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// The stream delivers in commit order: once the wake-up for this
	// insert has arrived, anything the two above caused would have too.
	plainInsert(t, db.pool, db.schema)
	w.waitMore(t, before, 30*time.Second, "the wake-up for the committed insert")
	// One wake-up, not three; a moment for a stray one to arrive is
	// unnecessary, as it would have preceded the one awaited.
	if got := w.n.Load() - before; got != 1 {
		t.Fatalf("%d wake-ups for one committed insert after a rollback and another table's insert, want 1", got)
	}
}

// A transaction too large for logical_decoding_work_mem is streamed in
// chunks before its commit (protocol 2): its stream commit wakes.
func TestWALWakesOnStreamedTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	// The smallest setting, so that a few hundred rows are streamed.
	// (Not url.Values: it would encode the space as "+", which libpq's
	// URL syntax reads as a plus sign.)
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "options=-c%20logical_decoding_work_mem%3D64kB"
	s := streamingStore(t, db, postgres.Config{WakeupURL: u.String()})
	w := runListen(t, s)
	activeSlot(t, db.pool, s, "")
	w.waitMore(t, 0, streamStart, "the wake-up after the stream starts")
	before := w.n.Load()
	if err := addTx(ctxT(t), s, db.pool, events(t, 2000, "bulk")...); err != nil {
		t.Fatal(err)
	}
	w.waitMore(t, before, 30*time.Second, "the wake-up for a streamed transaction")
	// The wake-up alone would not prove the path: the transaction must
	// have been streamed, not sent whole at its commit.
	waitFor(t, 10*time.Second, "the slot's statistics to count a streamed transaction", func() bool {
		var streamed int64
		if err := db.pool.QueryRow(ctxT(t), `SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE starts_with(slot_name, $1)`,
			s.WakeupSlotPrefixForTest()).Scan(&streamed); err != nil {
			t.Fatal(err)
		}
		return streamed > 0
	})
}

// A relay whose replication connection dies leaves no slot behind: the
// slot is temporary, dropped with its connection. The store reconnects
// with a new slot, and once Listen ends none of its slots remain.
func TestWALSlotDiesWithItsConnection(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	s := streamingStore(t, db, postgres.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var wakes atomic.Int64
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { wakes.Add(1) }) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Listen returned %v, want context.Canceled", err)
			}
		}
	}
	t.Cleanup(stop)

	first := activeSlot(t, db.pool, s, "")
	// Streaming, not still creating the slot (it is active meanwhile).
	waitFor(t, streamStart, "the wake-up after the stream starts", func() bool { return wakes.Load() >= 1 })
	terminate(t, db.pool, first.pid)
	waitFor(t, 10*time.Second, "the killed connection's slot to be dropped", func() bool {
		for _, sl := range slotsWithPrefix(t, db.pool, s.WakeupSlotPrefixForTest()) {
			if sl.name == first.name {
				return false
			}
		}
		return true
	})
	activeSlot(t, db.pool, s, first.name)
	waitFor(t, streamStart, "the wake-up after the new stream starts", func() bool { return wakes.Load() >= 2 })
	before := wakes.Load()
	plainInsert(t, db.pool, db.schema)
	waitFor(t, 30*time.Second, "a wake-up from the new stream", func() bool { return wakes.Load() > before })

	// The relay stops (or its process dies: the server sees the same
	// closed connection): nothing of it remains.
	stop()
	waitFor(t, 10*time.Second, "the stopped store's slot to be dropped", func() bool {
		return len(slotsWithPrefix(t, db.pool, s.WakeupSlotPrefixForTest())) == 0
	})
}

// logLines counts the lines of a text log that contain s.
func logLines(log, s string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

const fallbackMsg = "outbox WAL wake-ups unavailable"

// tempRole creates a login role without REPLICATION for the test and
// drops it afterwards, with its connections.
func tempRole(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	role := pgtest.NewSchemaName("norepl")
	if _, err := pool.Exec(ctxT(t), "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN NOREPLICATION"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		if _, err := pool.Exec(ctx, "DROP ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return role
}

// A role without REPLICATION: the store falls back to LISTEN, says so once
// (however many reconnections follow) with what to run, and still wakes
// for writers that notify.
func TestWALFallsBackWithoutReplicationRole(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	role := tempRole(t, db.pool)
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	var log lockedBuffer
	s := newStore(t, db, postgres.Config{WakeupURL: u.String(),
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	w := runListen(t, s)
	channel := s.Config().Channel
	var pid int32
	waitFor(t, 30*time.Second, "the fallback LISTEN to connect", func() bool {
		pid = listenerPID(t, db.pool, channel)
		return pid != 0
	})
	w.waitMore(t, 0, 10*time.Second, "the wake-up after LISTEN connects")
	if got := logLines(log.String(), fallbackMsg); got != 1 {
		t.Fatalf("%d fallback warnings, want 1:\n%s", got, log.String())
	}
	if l := log.String(); !strings.Contains(l, "REPLICATION") || !strings.Contains(l, role) {
		t.Fatalf("the warning does not say which role lacks REPLICATION:\n%s", l)
	}
	if n := len(slotsWithPrefix(t, db.pool, s.WakeupSlotPrefixForTest())); n != 0 {
		t.Fatalf("%d slots created for a role that may not replicate", n)
	}

	// A reconnection tries the stream again and falls back again: no
	// second warning.
	terminate(t, db.pool, pid)
	waitFor(t, 30*time.Second, "the LISTEN to reconnect", func() bool {
		p := listenerPID(t, db.pool, channel)
		return p != 0 && p != pid
	})
	if got := logLines(log.String(), fallbackMsg); got != 1 {
		t.Fatalf("%d fallback warnings after a reconnection, want still 1:\n%s", got, log.String())
	}
	before := w.n.Load()
	notifier := newStore(t, db, postgres.Config{Notify: postgres.NotifyInTransaction})
	if err := addTx(ctxT(t), notifier, db.pool, mustEvent(t, "notified", 1)); err != nil {
		t.Fatal(err)
	}
	w.waitMore(t, before, 10*time.Second, "the wake-up from a notifying writer")
}

// A publication missing (the migrating role could not create it, or an
// operator dropped it): fall back with the statement to run; once it
// exists, the next reconnection streams.
func TestWALFallsBackWithoutPublication(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	pubName := pgx.Identifier{postgres.PublicationNameForTest(db.schema, postgres.DefaultTable)}.Sanitize()
	ctx := ctxT(t)
	if _, err := db.pool.Exec(ctx, "DROP PUBLICATION "+pubName); err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	s := streamingStore(t, db, postgres.Config{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	w := runListen(t, s)
	var pid int32
	waitFor(t, 30*time.Second, "the fallback LISTEN to connect", func() bool {
		pid = listenerPID(t, db.pool, s.Config().Channel)
		return pid != 0
	})
	l := log.String()
	want := "CREATE PUBLICATION " + strings.ReplaceAll(pubName, `"`, `\"`)
	if logLines(l, fallbackMsg) != 1 || !strings.Contains(l, want) {
		t.Fatalf("want one fallback warning giving %s, got:\n%s", want, l)
	}
	if _, err := db.pool.Exec(ctx, "CREATE PUBLICATION "+pubName+" FOR TABLE "+
		pgx.Identifier{db.schema, postgres.DefaultTable}.Sanitize()+" (id) WITH (publish = 'insert')"); err != nil {
		t.Fatal(err)
	}
	before := w.n.Load()
	terminate(t, db.pool, pid)
	activeSlot(t, db.pool, s, "")
	waitFor(t, streamStart, "the wake-up after the stream starts", func() bool { return w.n.Load() > before })
	before = w.n.Load()
	plainInsert(t, db.pool, db.schema)
	w.waitMore(t, before, 30*time.Second, "a wake-up from the stream")
}

// Migration 7 creates the publication under the name the store streams
// from, computed in SQL, also when the names are long enough to be
// hashed; reverting it drops the publication.
func TestMigrationCreatesPublication(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	ctx := ctxT(t)
	for _, tc := range []struct{ prefix, table string }{
		{"pub", postgres.DefaultTable},
		{"pub_" + strings.Repeat("s", 40), strings.Repeat("t", 40)}, // hashed
	} {
		schema, table := pgtest.Schema(t, pool, tc.prefix), tc.table
		m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: schema, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		name := postgres.PublicationNameForTest(schema, table)
		var tables []string
		rows, err := pool.Query(ctx, `SELECT schemaname || '.' || tablename || ' ' || array_to_string(attnames, ',')
FROM pg_publication_tables WHERE pubname = $1`, name)
		if err != nil {
			t.Fatal(err)
		}
		if tables, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if want := schema + "." + table + " id"; len(tables) != 1 || tables[0] != want {
			t.Fatalf("publication %q publishes %v, want [%s]", name, tables, want)
		}
		var insertOnly bool
		if err := pool.QueryRow(ctx, `SELECT pubinsert AND NOT pubupdate AND NOT pubdelete AND NOT pubtruncate FROM pg_publication WHERE pubname = $1`, name).Scan(&insertOnly); err != nil || !insertOnly {
			t.Fatalf("publication %q publishes more than inserts (%v)", name, err)
		}
		if _, err := m.Down(ctx, 6); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, name).Scan(&n); err != nil || n != 0 {
			t.Fatalf("publication %q survived the down migration (%d, %v)", name, n, err)
		}
		if _, err := m.Down(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// A schema dropped with CASCADE leaves its publication behind, without
// the table; migrating a new schema of the same name must point the
// publication at the new table, or its relays could never stream (they
// fell back to LISTEN with a warning on every run).
func TestMigrationTakesOverALeftoverPublication(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	ctx := ctxT(t)
	schema := pgtest.NewSchemaName("publeft")
	name := postgres.PublicationNameForTest(schema, postgres.DefaultTable)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		_, _ = pool.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pgx.Identifier{name}.Sanitize())
	})
	published := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT schemaname || '.' || tablename || ' ' || array_to_string(attnames, ',')
FROM pg_publication_tables WHERE pubname = $1`, name)
		if err != nil {
			t.Fatal(err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return tables
	}
	for round := range 2 {
		if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
			t.Fatal(err)
		}
		if got, want := published(), schema+"."+postgres.DefaultTable+" id"; len(got) != 1 || got[0] != want {
			t.Fatalf("round %d: publication %q publishes %v, want [%s]", round, name, got, want)
		}
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Fatal(err)
		}
		if got := published(); len(got) != 0 {
			t.Fatalf("round %d: after DROP SCHEMA the publication still lists %v", round, got)
		}
	}
}

// A migrating role that owns its schema but may not create publications
// (no CREATE on the database) migrates all the same, with a warning; its
// relays fall back.
func TestMigrationWithoutPublicationRights(t *testing.T) {
	t.Parallel()
	admin := pgtest.Pool(t, 2)
	role := tempRole(t, admin)
	schema := pgtest.NewSchemaName("nopub")
	ctx := ctxT(t)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE SCHEMA %s AUTHORIZATION %s", pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate as a role without CREATE on the database: %v", err)
	}
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = $1`,
		postgres.PublicationNameForTest(schema, postgres.DefaultTable)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d publications created by a role without the right (%v)", n, err)
	}
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after a migration without the publication: %v", err)
	}
}

// A stream that announces commits at the busy rate pauses (the relay
// polls meanwhile, finding events unannounced) and comes back once the
// pause is over, without a warning: a pause is not a failure.
func TestWALStreamPausesWhileEventsFlow(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	var log lockedBuffer
	s := streamingStore(t, db, postgres.Config{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	s.SetBusyLimitsForTest(20, 2*time.Second, time.Second)
	w := runListen(t, s)
	first := activeSlot(t, db.pool, s, "")
	w.waitMore(t, 0, streamStart, "the wake-up after the stream starts")

	// Commits at ~100/s until the stream closes its slot.
	deadline := time.Now().Add(20 * time.Second)
	for paused := false; !paused; {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not pause under 100 commits/s")
		}
		for range 10 {
			plainInsert(t, db.pool, db.schema)
			time.Sleep(10 * time.Millisecond) // pacing the writer, not waiting for the code under test
		}
		paused = len(slotsWithPrefix(t, db.pool, s.WakeupSlotPrefixForTest())) == 0
	}
	// Quiet now: the stream comes back with a new slot, and wakes (no
	// stream, no wake-ups, until then).
	before := w.n.Load()
	activeSlot(t, db.pool, s, first.name)
	waitFor(t, streamStart, "the wake-up after the stream resumes", func() bool { return w.n.Load() > before })
	before = w.n.Load()
	plainInsert(t, db.pool, db.schema)
	w.waitMore(t, before, 30*time.Second, "a wake-up from the resumed stream")
	if l := log.String(); l != "" {
		t.Fatalf("the pause logged at warn level:\n%s", l)
	}
}

// A stream whose WAL sender decodes WAL at the costly rate, none of it the
// outbox's, pauses and says so once at warn level; it comes back after the
// pause.
func TestWALStreamPausesWhenDecodingIsCostly(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	var log lockedBuffer
	s := newStore(t, db, postgres.Config{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	// 64 KiB/s over a second: what the test writes into another table.
	s.SetWALCostLimitsForTest(64<<10, time.Second, 500*time.Millisecond)
	w := runListen(t, s)
	first := activeSlot(t, db.pool, s, "")
	w.waitMore(t, 0, streamStart, "the wake-up after the stream starts")
	ctx := ctxT(t)
	other := pgx.Identifier{db.schema, "bulk"}.Sanitize()
	if _, err := db.pool.Exec(ctx, "CREATE TABLE "+other+" (n int, pad text)"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the costly stream to pause", func() bool {
		if _, err := db.pool.Exec(ctx, "INSERT INTO "+other+" SELECT g, repeat('x', 200) FROM generate_series(1, 1000) g"); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(log.String(), "outbox WAL wake-ups paused")
	})
	activeSlot(t, db.pool, s, first.name)
	if got := logLines(log.String(), "outbox WAL wake-ups paused"); got != 1 {
		t.Fatalf("%d warnings about the costly stream, want 1:\n%s", got, log.String())
	}
}
