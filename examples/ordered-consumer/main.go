package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// options are the knobs of a run; main reads them from flags.
type options struct {
	DatabaseURL  string
	Schema       string
	Orders       int
	Writers      int // producer transactions at once
	Concurrency  int // qstashdev's parallel deliveries
	FailEvery    int // the handler fails the first run of every n-th event
	LoseAckEvery int // the endpoint loses the acknowledgement of every n-th event
	Replay       int // "paid" events an operator replays at the end
	Timeout      time.Duration
	Verbose      bool // log every failed delivery, injected ones and gaps included
	Out          io.Writer
}

func main() {
	opts := options{Out: os.Stdout}
	flag.StringVar(&opts.DatabaseURL, "database-url", envOr("DATABASE_URL", defaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	flag.StringVar(&opts.Schema, "schema", "outboxkit_ordered_consumer", "schema to (re)create for this run")
	flag.IntVar(&opts.Orders, "orders", 200, "orders to move through placed → paid → shipped → delivered")
	flag.IntVar(&opts.Writers, "writers", 4, "orders the producer works on at once")
	flag.IntVar(&opts.Concurrency, "concurrency", 8, "deliveries qstashdev makes at once")
	flag.IntVar(&opts.FailEvery, "fail-every", 7, "fail the first handler run of every n-th event (0: never)")
	flag.IntVar(&opts.LoseAckEvery, "lose-ack-every", 25, "lose the acknowledgement of every n-th applied event (0: never)")
	flag.IntVar(&opts.Replay, "replay", 20, "already applied events to replay at the end")
	flag.DurationVar(&opts.Timeout, "timeout", time.Minute, "give up after this long")
	flag.BoolVar(&opts.Verbose, "v", false, "log every failed delivery (the injected failures and the gaps too)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordered-consumer:", err)
		os.Exit(1)
	}
	if !sum.ok() {
		fmt.Fprintln(os.Stderr, "ordered-consumer: FAILED:", sum.problem())
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, opts options) (summary, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	out := opts.Out
	sum := summary{Orders: opts.Orders, Events: opts.Orders * len(statuses)}

	pool, err := connect(ctx, opts.DatabaseURL)
	if err != nil {
		return sum, err
	}
	defer pool.Close()
	if err := setupSchema(ctx, pool, opts.Schema); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "PostgreSQL: %s, schema %s migrated\n", redact(opts.DatabaseURL), opts.Schema)

	// Ordering on: Add numbers each order's events 1, 2, 3, 4 (what the
	// Sequencer orders by), and the relay publishes an order's next event
	// only once QStash has accepted the one before.
	store, err := postgres.New(pool, &postgres.Config{Schema: opts.Schema, Ordering: true})
	if err != nil {
		return sum, err
	}
	seq, err := postgres.NewSequencer(pool, &postgres.SequencerConfig{Schema: opts.Schema})
	if err != nil {
		return sum, err
	}

	// An in-process QStash delivering with several workers at once. Every
	// delay is scaled by 0.01: a failed attempt is retried after 10ms, and a
	// gap's Retry-After (1s, the Sequencer's default) becomes 10ms too. The
	// deduplication window is shortened so the replay below reaches the
	// consumer, as a replay after QStash's 10-minute window would.
	qs, err := qstashdev.New(qstashdev.Config{
		Concurrency:         opts.Concurrency,
		Backoff:             func(int) time.Duration { return time.Second },
		BackoffScale:        0.01,
		DeduplicationWindow: time.Millisecond,
	})
	if err != nil {
		return sum, err
	}
	qsURL, stopQS, err := serve(qs.Handler())
	if err != nil {
		return sum, err
	}
	defer func() { _ = qs.Close(); stopQS() }()

	// The receiver logs every failed delivery at Warn: here that would be
	// each injected failure and each gap, hundreds of lines the summary
	// counts anyway, so only errors are logged unless -v. A service keeps
	// the default.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if opts.Verbose {
		logger = slog.Default()
	}

	// The consumer endpoint: verify, decode, apply in order.
	track := newTracking(opts.Schema)
	f := newFaults(opts.FailEvery, opts.LoseAckEvery)
	consumerURL, stopConsumer, err := serveLazy(func(url string) (http.Handler, error) {
		rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
			CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
			NextSigningKey:    qstashdev.DefaultNextSigningKey,
			URL:               url,
			Handler:           f.handler(track.mux()),
			Deduper:           seq, // a SequencedDeduper: sequenced events apply in order
			Consumer:          "tracking",
			OnDecision:        f.decision,
			Logger:            logger,
		})
		if err != nil {
			return nil, err
		}
		return f.endpoint(rc), nil
	}, "/order-status")
	if err != nil {
		return sum, err
	}
	defer stopConsumer()
	fmt.Fprintf(out, "qstashdev:  %s (%d parallel deliveries)\nconsumer:   %s\n", qsURL, opts.Concurrency, consumerURL)

	// Retries: a gap is retried until its predecessor is applied, so allow
	// the most attempts QStash allows (100, over a second at 10ms each)
	// rather than its default 3.
	retries := 100
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     qsURL,
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: consumerURL},
		Retries:     &retries,
	})
	if err != nil {
		return sum, err
	}
	defer pub.Close()
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{
		BatchSize: 100, PollInterval: 50 * time.Millisecond,
		Retry: core.RetryPolicy{InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second},
	})
	if err != nil {
		return sum, err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	defer func() { stopRelay(); <-relayDone }()

	prod := newProducer(pool, store, opts.Schema)
	if err := prod.writeAll(ctx, opts.Orders, max(opts.Writers, 1)); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "%7s  wrote %d orders × %d status events\n", since(start), opts.Orders, len(statuses))

	// Wait for every status change to be applied and for QStash to settle
	// (the redeliveries of lost acknowledgements included).
	if err := waitFor(ctx, func() bool { return seq.Stats().Applied >= int64(sum.Events) || len(qs.DLQ()) > 0 }); err != nil {
		return sum, fmt.Errorf("waiting for %d status changes (applied %d): %w", sum.Events, seq.Stats().Applied, err)
	}
	if err := qs.WaitIdle(ctx); err != nil {
		return sum, fmt.Errorf("waiting for qstashdev to settle: %w", err)
	}
	fmt.Fprintf(out, "%7s  applied %d status changes, QStash idle\n", since(start), seq.Stats().Applied)

	// An operator replays some "paid" events: the relay publishes them
	// again with their IDs and sequences, and the Sequencer finds them
	// stale.
	if opts.Replay > 0 {
		before := seq.Stats().Stale
		n, err := store.Replay(ctx, core.ReplayFilter{IDs: prod.eventIDs(1, opts.Replay)})
		if err != nil {
			return sum, fmt.Errorf("replay: %w", err)
		}
		relay.Wake()
		if err := waitFor(ctx, func() bool { return seq.Stats().Stale >= before+n }); err != nil {
			return sum, fmt.Errorf("waiting for %d replayed events: %w", n, err)
		}
		sum.Replayed = int(n)
		fmt.Fprintf(out, "%7s  replayed %d paid events: dropped as stale\n", since(start), n)
	}
	if err := waitFor(ctx, func() bool {
		st, err := store.Stats(ctx)
		return err == nil && st.Pending == 0
	}); err != nil {
		return sum, fmt.Errorf("waiting for the outbox to drain: %w", err)
	}
	if err := qs.WaitIdle(ctx); err != nil {
		return sum, fmt.Errorf("waiting for qstashdev to settle: %w", err)
	}

	st, err := store.Stats(ctx)
	if err != nil {
		return sum, err
	}
	ss := seq.Stats()
	sum.Pending = st.Pending
	sum.Gaps, sum.Stale = ss.Gaps, ss.Stale
	sum.Failures, sum.LostAcks = f.counts()
	sum.DeadLettered = len(qs.DLQ())
	if err := track.check(ctx, pool, &sum); err != nil {
		return sum, err
	}
	sum.Elapsed = time.Since(start)
	printSummary(out, sum)
	return sum, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

func setupSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := dropSchema(ctx, pool, schema); err != nil {
		return err
	}
	s := pgx.Identifier{schema}.Sanitize()
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	_, err := pool.Exec(ctx, `
		CREATE TABLE `+s+`.orders (id bigint PRIMARY KEY, status text NOT NULL);
		CREATE TABLE `+s+`.tracking (order_id bigint PRIMARY KEY, status text NOT NULL, total_cents bigint NOT NULL, paid_cents bigint, carrier text);
		CREATE TABLE `+s+`.tracking_log (id bigserial PRIMARY KEY, order_id bigint NOT NULL, sequence bigint NOT NULL, status text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	if err != nil {
		return fmt.Errorf("create business tables: %w", err)
	}
	return nil
}

// dropSchema removes what a previous run left. Migrating down first drops
// the outbox's publication (the relay's WAL wake-ups): publications belong
// to the database, so dropping the schema alone would leave it behind
// without its table (the next Migrate would point it at the new table, but
// a schema that is not recreated would leave it for good).
func dropSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := m.Down(ctx, 0); err != nil {
		return fmt.Errorf("migrate down the previous run: %w", err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("reset schema: %w", err)
	}
	return nil
}
