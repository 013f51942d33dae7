package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Through PgBouncer in transaction mode (CI runs 1.18 on 127.0.0.1:6432,
// .ci/services.sh): each transaction may run on another server session,
// so nothing session-bound survives, and named prepared statements are
// lost between transactions.

// bouncerPool opens a pool through PgBouncer with postgres.NewPool,
// closed when t ends.
func bouncerPool(t testing.TB, maxConns int) *pgxpool.Pool {
	t.Helper()
	pgtest.RequireBouncer(t)
	pool, err := postgres.NewPool(ctxT(t), pgtest.BouncerURLWithMaxConns(t, maxConns))
	if err != nil {
		t.Fatalf("NewPool through PgBouncer: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// bouncerDB is newDB through PgBouncer: the schema is created and
// migrated through it too.
func bouncerDB(t testing.TB, maxConns int) testDB {
	t.Helper()
	pool := bouncerPool(t, maxConns)
	return testDB{pool: pool, schema: migratedSchema(t, pool)}
}

// statementsWork runs parameterised statements on pool from several
// goroutines at once, so that they meet other transactions' server
// sessions.
func statementsWork(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				var got int
				if err := pool.QueryRow(ctx, "SELECT $1::int + $2::int", g, i).Scan(&got); err != nil {
					errs <- err
					return
				}
				if got != g+i {
					errs <- errors.New("wrong sum")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a statement through the pool failed: %v", err)
	}
}

func execMode(pool *pgxpool.Pool) pgx.QueryExecMode {
	return pool.Config().ConnConfig.DefaultQueryExecMode
}

// Directly, NewPool's pool is pgxpool.New's: prepared statements.
func TestNewPoolDirectKeepsPreparedStatements(t *testing.T) {
	t.Parallel()
	u := pgtest.URL()
	pool, err := postgres.NewPool(ctxT(t), u+map[bool]string{true: "&", false: "?"}[strings.Contains(u, "?")]+"pool_max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if m := execMode(pool); m != pgx.QueryExecModeCacheStatement {
		t.Fatalf("direct pool runs %v, want cache_statement as pgxpool.New", m)
	}
	statementsWork(t, pool)
}

// Through PgBouncer, NewPool's statements are unnamed and survive.
func TestNewPoolThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool := bouncerPool(t, 8)
	if m := execMode(pool); m != pgx.QueryExecModeCacheDescribe {
		t.Fatalf("pool through PgBouncer runs %v, want cache_describe", m)
	}
	statementsWork(t, pool)
}

// An exec mode the URL chooses is kept, even through PgBouncer.
func TestNewPoolKeepsTheURLsExecMode(t *testing.T) {
	t.Parallel()
	pgtest.RequireBouncer(t)
	for mode, want := range map[string]pgx.QueryExecMode{
		"exec":            pgx.QueryExecModeExec,
		"cache_statement": pgx.QueryExecModeCacheStatement,
	} {
		pool, err := postgres.NewPool(ctxT(t), pgtest.BouncerURLWithMaxConns(t, 2)+"&default_query_exec_mode="+mode)
		if err != nil {
			t.Fatal(err)
		}
		got := execMode(pool)
		pool.Close()
		if got != want {
			t.Errorf("default_query_exec_mode=%s: the pool runs %v", mode, got)
		}
	}
}

// NewPool says why it changed the mode, once, in slog.Default(); not a
// word for a direct pool. Not parallel: it swaps the default logger.
func TestNewPoolSaysWhy(t *testing.T) {
	pgtest.RequireBouncer(t)
	var log lockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	defer slog.SetDefault(prev)
	for _, u := range []string{pgtest.URL(), pgtest.BouncerURL()} {
		pool, err := postgres.NewPool(ctxT(t), u)
		if err != nil {
			t.Fatal(err)
		}
		pool.Close()
	}
	if n := logLines(log.String(), "cache_describe"); n != 1 {
		t.Fatalf("%d log lines about the exec mode for one pool through PgBouncer and one direct, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "6432") {
		t.Fatalf("the line does not say what it saw:\n%s", log.String())
	}
}

func TestNewPoolRefusesAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	_, err := postgres.NewPool(ctxT(t), "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	if err == nil || !strings.Contains(err.Error(), "check that PostgreSQL or PgBouncer is up") {
		t.Fatalf("NewPool on a closed port: %v, want an error that says what to check", err)
	}
}

// A default pgxpool through PgBouncer loses its prepared statements; the
// store's error says why and what to do, keeping the server's. On a
// PgBouncer pool of one server session, a second client's statement
// meets the first's name (42P05), and a statement the session no longer
// has (26000) is what PgBouncer's next server session gives.
func TestPreparedStatementErrorsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pgtest.RequireBouncer(t)
	schema := newDB(t, 2).schema
	open := func() (*postgres.Store, *pgxpool.Pool) {
		pool, err := pgxpool.New(ctxT(t), pgtest.BouncerOneServerURL(t)+"&pool_max_conns=1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := postgres.New(pool, &postgres.Config{Schema: schema, Wakeup: postgres.WakeupPoll})
		if err != nil {
			t.Fatal(err)
		}
		return s, pool
	}
	check := func(what, code string, err error) {
		t.Helper()
		var pe *pgconn.PgError
		switch {
		case err == nil:
			t.Fatalf("%s: no error", what)
		case !errors.Is(err, postgres.ErrPreparedStatementLost):
			t.Fatalf("%s: %v, want ErrPreparedStatementLost", what, err)
		case !errors.As(err, &pe) || pe.Code != code:
			t.Fatalf("%s: %v, want the server's SQLSTATE %s kept", what, err, code)
		case !strings.Contains(err.Error(), "postgres.NewPool") || !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe"):
			t.Fatalf("%s: %v does not say what to do", what, err)
		}
	}
	ctx := ctxT(t)
	first, firstPool := open()
	if _, err := first.Stats(ctx); err != nil {
		t.Fatalf("first stats (prepares on the one server session): %v", err)
	}
	second, _ := open()
	_, err := second.Stats(ctx)
	check("a second pool's first stats", "42P05", err)

	// Forget the server session's statements, as a switch to another
	// session does; the first pool still thinks it has its own.
	if _, err := firstPool.Exec(ctx, "DEALLOCATE ALL", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	_, err = first.Stats(ctx)
	check("stats after the session lost the statement", "26000", err)
}

// Behind PgBouncer without a WakeupURL, Listen does not LISTEN into the
// void: it warns once per Store that relays poll and what to set, and
// never wakes.
func TestWakeupsBehindPgBouncerPollAndWarnOnce(t *testing.T) {
	t.Parallel()
	db := bouncerDB(t, 4)
	var log lockedBuffer
	s := newStore(t, db, postgres.Config{
		Notify: postgres.NotifyInTransaction,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	const msg = "go through a connection pooler that does not keep LISTEN"
	for i := 1; i <= 2; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wakes int
		var mu sync.Mutex
		done := make(chan error, 1)
		go func() {
			done <- s.Listen(ctx, func() { mu.Lock(); wakes++; mu.Unlock() })
		}()
		waitFor(t, 30*time.Second, "the note that wake-ups poll", func() bool { return logLines(log.String(), msg) >= i })
		// A notifying write: nothing may hear it.
		if err := addTx(ctxT(t), s, db.pool, mustEvent(t, "unheard", i)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Listen returned %v, want context.Canceled", err)
		}
		mu.Lock()
		if wakes != 0 {
			t.Fatalf("Listen %d behind PgBouncer woke %d times", i, wakes)
		}
		mu.Unlock()
	}
	l := log.String()
	if w := logLines(l, "level=WARN"); w != 1 || logLines(l, "level=WARN msg=\"outbox wake-ups "+msg) != 1 {
		t.Fatalf("%d warnings for two Listens behind PgBouncer, want the one about polling:\n%s", w, l)
	}
	for _, want := range []string{"WakeupURL", "--wakeup-url", "OUTBOX_WAKEUP_URL"} {
		if !strings.Contains(l, want) {
			t.Fatalf("the warning does not name %s:\n%s", want, l)
		}
	}
	if pid := listenerPID(t, pgtest.Pool(t, 1), s.Config().Channel); pid != 0 {
		t.Fatalf("backend %d LISTENs on the store's channel behind PgBouncer", pid)
	}
}

// With WakeupURL past PgBouncer, a relay whose pool goes through it wakes
// at each commit: with an hour's poll, every event is delivered within
// milliseconds of its commit.
func TestWakeupURLPastPgBouncer(t *testing.T) {
	t.Parallel()
	db := bouncerDB(t, 4)
	var log lockedBuffer
	s := newStore(t, db, postgres.Config{
		// LISTEN, which works on any wal_level, with writers that
		// notify: the WAL stream has its own tests (wal_test.go).
		Wakeup: postgres.WakeupListen, Notify: postgres.NotifyInTransaction,
		WakeupURL: pgtest.URL(),
		Logger:    slog.New(slog.NewTextHandler(&log, nil)),
	})
	pub := memory.NewPublisher()
	runRelay(t, s, pub, core.RelayConfig{PollInterval: time.Hour})
	direct := pgtest.Pool(t, 1)
	waitFor(t, 30*time.Second, "the store's LISTEN past PgBouncer", func() bool {
		return listenerPID(t, direct, s.Config().Channel) != 0
	})
	ctx := ctxT(t)
	var lat []time.Duration
	for i := range 30 {
		if err := addTx(ctx, s, db.pool, mustEvent(t, "woken", i)); err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := pub.WaitFor(wctx, i+1)
		cancel()
		if err != nil {
			t.Fatalf("event %d not delivered with an hour's poll: the wake-up past PgBouncer did not come (%v)\n%s", i, err, log.String())
		}
		lat = append(lat, time.Since(committed))
	}
	slices.Sort(lat)
	p50 := lat[len(lat)/2]
	t.Logf("commit→publish through PgBouncer with a direct WakeupURL: p50 %v, max %v", p50, lat[len(lat)-1])
	// Generous for a loaded CI machine under -race; polling would take
	// an hour.
	if p50 > 100*time.Millisecond {
		t.Fatalf("p50 %v, want wake-ups within milliseconds", p50)
	}
	if strings.Contains(log.String(), "level=WARN") {
		t.Fatalf("a store with WakeupURL warned:\n%s", log.String())
	}
}

// The store's conformance suite with its pool, and the migrations,
// through PgBouncer (postgres.NewPool); wake-ups past it (WakeupURL).
// Writers notify, so the Notifier case holds whatever the server's
// wal_level.
func TestStoreConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool := bouncerPool(t, 8)
	coretest.TestStore(t, func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
		db := testDB{pool: pool, schema: migratedSchema(t, pool)}
		s := newStore(t, db, postgres.Config{
			Ordering: opts.Ordering, WakeupURL: pgtest.URL(), Notify: postgres.NotifyInTransaction,
		})
		return s, func(ctx context.Context, events ...core.Event) error {
			return addTx(ctx, s, pool, events...)
		}
	}, coretest.StoreFeatures{
		Ordering: true, Notifier: true, Stats: true, Replay: true, Prune: true, DestinationFilter: true,
	})
}

// The same with DeletePublished, whose settlements are other statements.
func TestStoreConformanceDeletePublishedThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool := bouncerPool(t, 8)
	coretest.TestStore(t, func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
		db := testDB{pool: pool, schema: migratedSchema(t, pool)}
		s := newStore(t, db, postgres.Config{Ordering: opts.Ordering, DeletePublished: true, Wakeup: postgres.WakeupPoll})
		return s, func(ctx context.Context, events ...core.Event) error {
			return addTx(ctx, s, pool, events...)
		}
	}, coretest.StoreFeatures{Ordering: true, Stats: true, DestinationFilter: true})
}

// The deduper through PgBouncer: its savepoints and commits are
// transaction-bound.
func TestDeduperConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool := bouncerPool(t, 4)
	coretest.TestDeduper(t, func(t *testing.T) core.Deduper {
		d, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: migratedSchema(t, pool)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
