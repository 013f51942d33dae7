package chaos_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// qsConcurrency is qstashdev's number of delivery workers: the most
// deliveries a consumer can have in flight, so the most effects one consumer
// crash can leave committed but unanswered.
const qsConcurrency = 4

// env is one run's world: an isolated schema, qstashdev behind the fault
// proxy, the consumer's listening socket, and the worker processes.
type env struct {
	t     *testing.T
	runID string
	// pool reaches PostgreSQL directly: the suite's checks and faults.
	pool *pgxpool.Pool
	// writes is the writers' pool: pool, or one through PgBouncer
	// (envConfig.bouncer).
	writes  *pgxpool.Pool
	bouncer bool
	schema  string
	store   *postgres.Store
	qs      *qstashdev.Server
	proxy   *proxy
	// deliveries is qstashdev's delivery concurrency (envConfig.deliveries).
	deliveries int

	consumerURL  string
	consumerSock *os.File

	relayBin, consumerBin string
	relays                []*proc
	consumer              *proc

	// Counted from the workers' stdout.
	publishCrashes, commitCrashes, hijacks, settleFailed, leaseLost atomic.Int64
	// onStats, when set, gets relay i's "stats ..." lines (-stats-every).
	onStats func(relay int, line string)
	// Counted from the -ordered consumer's stdout.
	seqGaps, seqStale, seqAlerts, seqParked, seqOverGap, failBefore, orderViolations atomic.Int64
}

type envConfig struct {
	// ordering is the test's own store's Ordering (its writes assign
	// sequences); each relay has its own -ordering flag.
	ordering bool
	// backoffScale is qstashdev's BackoffScale, which also shortens a
	// consumer's Retry-After hint (whole seconds). Defaults to 1.
	backoffScale float64
	// bouncer: the migrations, the writers and the relays reach the
	// database through PgBouncer in transaction mode (pgtest.BouncerURL,
	// pools from postgres.NewPool), the relays' wake-ups past it
	// (-wakeup-url). The consumer and the suite's checks stay direct.
	bouncer bool
	// deliveries is qstashdev's number of delivery workers. Defaults to
	// qsConcurrency.
	deliveries int
	// partitions is the layout the outbox and processed tables are
	// migrated with (partitioned_test.go).
	partitions postgres.Partitioning
}

func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	e := &env{t: t, runID: randomHex(4), bouncer: cfg.bouncer, deliveries: cmp.Or(cfg.deliveries, qsConcurrency)}
	e.relayBin, e.consumerBin = binaries(t)
	e.pool = pgtest.Pool(t, 6)
	e.writes = e.pool
	ctx := context.Background()
	if cfg.bouncer {
		pgtest.RequireBouncer(t)
		pool, err := postgres.NewPool(ctx, pgtest.BouncerURLWithMaxConns(t, 6))
		if err != nil {
			t.Fatalf("pool through PgBouncer: %v", err)
		}
		t.Cleanup(pool.Close)
		e.writes = pool
	}
	e.schema = pgtest.Schema(t, e.pool, "chaos")
	if err := postgres.Migrate(ctx, e.writes, &postgres.MigrateConfig{Schema: e.schema, Partitions: cfg.partitions}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	_, err := e.writes.Exec(ctx, `
		CREATE TABLE `+e.table("orders")+` (event_id uuid PRIMARY KEY, kind text NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE TABLE `+e.table("effects")+` (event_id uuid PRIMARY KEY, applied int NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE TABLE `+e.table("dups")+` (event_id uuid PRIMARY KEY, n int NOT NULL)`)
	if err != nil {
		t.Fatalf("create tables: %v", err)
	}
	if e.store, err = postgres.New(e.writes, &postgres.Config{Schema: e.schema, Ordering: cfg.ordering}); err != nil {
		t.Fatal(err)
	}

	e.qs, err = qstashdev.New(qstashdev.Config{
		Concurrency: e.deliveries,
		// QStash's own schedule (12s, 2m28s, ...) scaled to a test: 25ms
		// doubling to 400ms, so a consumer that is down for a second is
		// retried a few times and never runs out of retries.
		Backoff: func(n int) time.Duration { return min(25*time.Millisecond<<min(n, 10), 400*time.Millisecond) },
		// Short enough that a relay's republish after a crash reaches the
		// consumer (as it would after QStash's 10 minutes): the consumer's
		// Deduper must absorb it, not QStash's.
		DeduplicationWindow: time.Millisecond,
		Timeout:             20 * time.Second,
		MaxDLQ:              100000,
		BackoffScale:        cfg.backoffScale,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.qs.Close() })
	e.proxy = newProxy(t, e.qs.Handler())

	// The consumer's socket belongs to the test: a restarted consumer takes
	// it over, and deliveries made meanwhile wait in its backlog.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.consumerURL = "http://" + ln.Addr().String() + "/orders"
	if e.consumerSock, err = ln.(*net.TCPListener).File(); err != nil {
		t.Fatal(err)
	}
	_ = ln.Close() // the duplicate in consumerSock keeps the socket listening
	t.Cleanup(func() { _ = e.consumerSock.Close() })
	return e
}

func (e *env) table(name string) string { return pgx.Identifier{e.schema, name}.Sanitize() }

func (e *env) relayAppName(i int) string { return fmt.Sprintf("chaosrelay-%s-%d", e.runID, i) }

// relayArgs are the flags every relay gets; extra ones follow (later flags
// win).
func (e *env) relayArgs(i int, extra ...string) []string {
	db := []string{"-database-url", pgtest.URL()}
	if e.bouncer {
		db = []string{"-database-url", pgtest.BouncerURL(), "-new-pool", "-wakeup-url", pgtest.URL()}
	}
	return append(append(db,
		"-schema", e.schema, "-app-name", e.relayAppName(i),
		"-qstash-url", e.proxy.url(), "-qstash-token", qstashdev.DefaultToken, "-dest", e.consumerURL,
	), extra...)
}

// startRelay starts relay i; args returns the extra flags of its n-th start.
func (e *env) startRelay(i int, args func(n int) []string) *proc {
	p := startProc(e.t, &proc{
		name: "relay" + strconv.Itoa(i), path: e.relayBin,
		args: func(n int) []string { return e.relayArgs(i, args(n)...) },
		onLine: func(line string) {
			switch {
			case line == "crash-after-publish":
				e.publishCrashes.Add(1)
			case strings.HasPrefix(line, "settle-failed"):
				e.settleFailed.Add(1)
			case strings.HasPrefix(line, "lease-lost"):
				e.leaseLost.Add(1)
			case strings.HasPrefix(line, "stats "):
				if e.onStats != nil {
					e.onStats(i, line)
				}
			}
		},
	})
	e.relays = append(e.relays, p)
	return p
}

func (e *env) startConsumer(extra ...string) *proc {
	e.consumer = startProc(e.t, &proc{
		name: "consumer", path: e.consumerBin, files: []*os.File{e.consumerSock},
		args: func(int) []string {
			return append([]string{
				"-database-url", pgtest.URL(), "-schema", e.schema, "-app-name", "chaosconsumer-" + e.runID,
				"-url", e.consumerURL, "-current-key", qstashdev.DefaultCurrentSigningKey, "-next-key", qstashdev.DefaultNextSigningKey,
			}, extra...)
		},
		onLine: func(line string) {
			switch line {
			case "crash-after-commit":
				e.commitCrashes.Add(1)
			case "hijack":
				e.hijacks.Add(1)
			case "sequence-gap":
				e.seqGaps.Add(1)
			case "sequence-gap-alert":
				e.seqGaps.Add(1)
				e.seqAlerts.Add(1)
			case "sequence-parked":
				e.seqGaps.Add(1)
				e.seqParked.Add(1)
			case "sequence-stale":
				e.seqStale.Add(1)
			case "sequence-applied-over-gap":
				e.seqOverGap.Add(1)
			case "fail-before":
				e.failBefore.Add(1)
			case "order-violation":
				e.orderViolations.Add(1)
			}
		},
	})
	return e.consumer
}

// stopWorkers stops every process gracefully and fails the test if one of
// them ended in an unexpected way along the run (a panic, a bad exit).
func (e *env) stopWorkers() {
	t := e.t
	t.Helper()
	all := append([]*proc{}, e.relays...)
	if e.consumer != nil {
		all = append(all, e.consumer)
	}
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(15 * time.Second)
		}()
	}
	wg.Wait()
	for _, p := range all {
		if f := p.stats().failures; len(f) > 0 {
			t.Errorf("%s ended unexpectedly: %s\n--- its log:\n%s", p.name, strings.Join(f, "; "), p.logTail())
		}
	}
}

// terminateBackends runs pg_terminate_backend on every connection whose
// application_name is one of names and returns how many it ended.
func (e *env) terminateBackends(ctx context.Context, names ...string) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = ANY($1) AND pid <> pg_backend_pid()`, names).Scan(&n)
	return n, err
}

// listening lists the relays among names whose wake-up connection,
// started after since, is running: a LISTEN, or a WAL sender streaming
// from the relay's temporary slot (the default where the server allows
// logical replication).
func (e *env) listening(ctx context.Context, since time.Time, names ...string) ([]string, error) {
	rows, err := e.pool.Query(ctx, `SELECT DISTINCT application_name FROM pg_stat_activity
		WHERE application_name = ANY($1) AND backend_start > $2
		  AND (query LIKE 'LISTEN %' OR (backend_type = 'walsender' AND query LIKE 'START_REPLICATION%'))`, names, since)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// waitUntil polls cond every 50ms until it holds or timeout passes. It is
// for conditions that depend on other processes; an error from cond (the
// database restarting, say) counts as "not yet".
func waitUntil(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// hold waits d or until ctx ends: the length of an injected outage, not a
// wait for other work.
func hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// relaysBehindBouncer waits until each relay has a client connection
// open in PgBouncer, read from its admin console (SHOW CLIENTS, on the
// simple protocol it only speaks): proof that the run went through it.
func (e *env) relaysBehindBouncer(ctx context.Context) error {
	admin, err := pgconn.ParseConfig(pgtest.BouncerURL())
	if err != nil {
		return err
	}
	admin.Database = "pgbouncer"
	return waitUntil(ctx, 20*time.Second, func(ctx context.Context) (bool, error) {
		conn, err := pgconn.ConnectConfig(ctx, admin)
		if err != nil {
			return false, err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		res, err := conn.Exec(ctx, "SHOW CLIENTS").ReadAll()
		if err != nil || len(res) != 1 {
			return false, err
		}
		col := -1
		for i, f := range res[0].FieldDescriptions {
			if f.Name == "application_name" {
				col = i
			}
		}
		if col < 0 {
			return false, errors.New("SHOW CLIENTS has no application_name column")
		}
		seen := map[string]bool{}
		for _, row := range res[0].Rows {
			seen[string(row[col])] = true
		}
		for i := range e.relays {
			if !seen[e.relayAppName(i)] {
				return false, nil
			}
		}
		return true, nil
	})
}

// wakeupReport says why relays' wake-up connections are not back, for a
// failure message: what each relay's connections are doing, the
// transactions a new logical slot would wait for (its creation waits until
// every transaction running when it started has ended), and the end of
// each relay's log.
func (e *env) wakeupReport(since time.Time, names []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	dump := func(title, q string, args ...any) {
		fmt.Fprintf(&b, "%s:\n", title)
		rows, err := e.pool.Query(ctx, q, args...)
		if err != nil {
			fmt.Fprintf(&b, "  %v\n", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, "  %v\n", err)
				return
			}
			fmt.Fprintf(&b, "  %v\n", vals)
		}
		if err := rows.Err(); err != nil {
			fmt.Fprintf(&b, "  %v\n", err)
		}
	}
	dump("the relays' connections (application_name, backend_type, started after the fault, state, wait event, query)",
		`SELECT application_name, backend_type, backend_start > $2, state, coalesce(wait_event_type || ':' || wait_event, ''), left(query, 100)
		   FROM pg_stat_activity WHERE application_name = ANY($1) ORDER BY application_name, backend_start`, names, since)
	dump("transactions open for more than 5 s (pid, application_name, age, state, query)",
		`SELECT pid, application_name, now() - xact_start, state, left(query, 100)
		   FROM pg_stat_activity WHERE xact_start < now() - interval '5 seconds' AND pid <> pg_backend_pid() ORDER BY xact_start`)
	dump("replication slots (name, temporary, active)", `SELECT slot_name, temporary, active FROM pg_replication_slots ORDER BY slot_name`)
	for i, r := range e.relays {
		tail := r.logTail()
		if len(tail) > 1500 {
			tail = tail[len(tail)-1500:]
		}
		fmt.Fprintf(&b, "relay %d's log ends:\n%s\n", i, tail)
	}
	return b.String()
}
