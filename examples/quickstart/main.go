// Command quickstart shows outboxkit end to end in one process, against the
// local PostgreSQL and an in-process QStash-compatible server:
//
//	go run ./examples/quickstart
//
// It migrates its own schema (outboxkit_quickstart, recreated each run),
// starts qstashdev, a consumer endpoint (the strict qstash.Receiver with the
// PostgreSQL deduper) and a relay, then places a few hundred orders — each
// order row and its event in one transaction. The consumer fails some first
// attempts (QStash retries them), one order is poison (dead-lettered), and
// an operator's replay republishes some events (the deduper suppresses
// them). It ends with a summary and exits non-zero if any order was lost or
// applied twice.
//
// DATABASE_URL selects the database; the default is the local server.
// The pool is opened with postgres.NewPool, so DATABASE_URL may lead
// through PgBouncer in transaction mode. The relay's wake-ups cannot:
// WAKEUP_URL (or -wakeup-url) is then PostgreSQL's own URL, past the
// pooler, and without it the relay says so once and finds events by
// polling (p50 about its poll interval instead of a few milliseconds):
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:6432/test?sslmode=disable \
//	WAKEUP_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
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
	DatabaseURL string
	WakeupURL   string // postgres.Config.WakeupURL: the relay's wake-ups past a pooler
	Schema      string
	Orders      int
	FailEvery   int           // the consumer fails the first attempt of every n-th order
	Replay      int           // events an operator replays after delivery
	Pace        time.Duration // pause between orders: spaced orders show the wake-up latency, a burst the polling's
	Timeout     time.Duration
	Out         io.Writer
}

func main() {
	opts := options{Out: os.Stdout}
	flag.StringVar(&opts.DatabaseURL, "database-url", envOr("DATABASE_URL", defaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	flag.StringVar(&opts.WakeupURL, "wakeup-url", os.Getenv("WAKEUP_URL"), "PostgreSQL URL of the relay's wake-ups, past a pooler such as PgBouncer (env WAKEUP_URL); empty: DATABASE_URL's")
	flag.StringVar(&opts.Schema, "schema", "outboxkit_quickstart", "schema to (re)create for this run")
	flag.IntVar(&opts.Orders, "orders", 300, "orders to place")
	flag.IntVar(&opts.FailEvery, "fail-every", 7, "fail the first delivery attempt of every n-th order")
	flag.IntVar(&opts.Replay, "replay", 20, "events to replay after delivery (duplicates the consumer must suppress)")
	flag.DurationVar(&opts.Pace, "pace", 0, "pause between orders (e.g. 20ms: each order then waits for a wake-up or a poll, as in a quiet service)")
	flag.DurationVar(&opts.Timeout, "timeout", 60*time.Second, "give up after this long")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
	if !sum.ok() {
		fmt.Fprintln(os.Stderr, "quickstart: FAILED:", sum.problem())
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// summary is what a run observed.
type summary struct {
	Orders, Poison     int
	Applied            int // distinct orders whose effect committed
	DoubleApplied      int // orders applied more than once (must be 0)
	RetriedOK          int // deliveries that succeeded after a failed attempt
	FailedAttempts     int // first attempts the consumer failed on purpose
	Duplicates         int // deliveries the deduper suppressed
	DeadLettered       int // messages in QStash's DLQ
	OutboxDeadLettered int64
	Pending            int64
	P50, P99           time.Duration
	Elapsed            time.Duration
}

func (s summary) ok() bool { return s.problem() == "" }

func (s summary) problem() string {
	var p []string
	if lost := s.Orders - s.Poison - s.Applied; lost != 0 {
		p = append(p, fmt.Sprintf("%d orders lost", lost))
	}
	if s.DoubleApplied != 0 {
		p = append(p, fmt.Sprintf("%d orders applied twice", s.DoubleApplied))
	}
	if s.DeadLettered != s.Poison {
		p = append(p, fmt.Sprintf("%d dead letters, want %d", s.DeadLettered, s.Poison))
	}
	if s.Pending != 0 {
		p = append(p, fmt.Sprintf("%d events still pending in the outbox", s.Pending))
	}
	return strings.Join(p, "; ")
}

func run(ctx context.Context, opts options) (summary, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	out := opts.Out
	sum := summary{Orders: opts.Orders}

	pool, err := connect(ctx, opts.DatabaseURL)
	if err != nil {
		return sum, err
	}
	defer pool.Close()
	if err := setupSchema(ctx, pool, opts.Schema); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "PostgreSQL: %s, schema %s migrated\n", redact(opts.DatabaseURL), opts.Schema)
	if opts.WakeupURL != "" {
		fmt.Fprintf(out, "wake-ups:   %s\n", redact(opts.WakeupURL))
	}

	store, err := postgres.New(pool, &postgres.Config{Schema: opts.Schema, WakeupURL: opts.WakeupURL})
	if err != nil {
		return sum, err
	}
	dedup, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: opts.Schema})
	if err != nil {
		return sum, err
	}

	// An in-process QStash. Its retry delays are scaled down a thousandfold
	// (12s becomes 12ms) so retries show up in seconds; its deduplication
	// window is shortened so the replay below reaches the consumer, as a
	// replay after QStash's 10-minute window would.
	qs, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.001, DeduplicationWindow: time.Millisecond})
	if err != nil {
		return sum, err
	}
	qsURL, stopQS, err := serve(qs.Handler())
	if err != nil {
		return sum, err
	}
	defer func() { _ = qs.Close(); stopQS() }()

	// The consumer endpoint: verify, decode, apply once.
	c := newConsumer(opts.Schema, opts.FailEvery)
	mux := core.NewMux()
	mux.Register("order.placed", postgres.Effect(c.applyOrder))
	consumerURL, stopConsumer, err := serveLazy(func(url string) (http.Handler, error) {
		return qstash.NewReceiver(&qstash.ReceiverConfig{
			CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
			NextSigningKey:    qstashdev.DefaultNextSigningKey,
			URL:               url,
			Handler:           mux,
			Deduper:           dedup,
			Consumer:          "invoicing",
			OnDecision:        c.decision,
		})
	}, "/orders")
	if err != nil {
		return sum, err
	}
	defer stopConsumer()
	fmt.Fprintf(out, "qstashdev:  %s\nconsumer:   %s\n", qsURL, consumerURL)

	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     qsURL,
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: consumerURL},
	})
	if err != nil {
		return sum, err
	}
	defer pub.Close()
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{
		BatchSize: 100, PollInterval: 200 * time.Millisecond,
		Retry: core.RetryPolicy{InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second},
	})
	if err != nil {
		return sum, err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	defer func() { stopRelay(); <-relayDone }()

	// Place the orders: the order row and its event commit together.
	poison := opts.Orders / 2
	for i := 1; i <= opts.Orders; i++ {
		total := 1000 + i
		if i == poison {
			total = -1 // the consumer refuses negative totals for good
			sum.Poison = 1
		}
		if err := c.placeOrder(ctx, pool, store, i, total); err != nil {
			return sum, fmt.Errorf("place order %d: %w", i, err)
		}
		if opts.Pace > 0 {
			select {
			case <-ctx.Done():
				return sum, ctx.Err()
			case <-time.After(opts.Pace):
			}
		}
	}
	fmt.Fprintf(out, "placed %d orders (one poison, every %d-th fails its first delivery)\n", opts.Orders, opts.FailEvery)

	// Wait for every order to be applied or dead-lettered, showing progress.
	want := opts.Orders - sum.Poison
	if err := c.waitProgress(ctx, out, want, func() bool { return len(qs.DLQ()) >= sum.Poison }); err != nil {
		return c.fill(sum, qs), fmt.Errorf("waiting for delivery: %w (%s)", err, c.fill(sum, qs).problem())
	}

	// An operator replays some delivered events: the relay republishes them
	// with their original IDs and the consumer's deduper suppresses them.
	if opts.Replay > 0 {
		ids := c.firstIDs(opts.Replay)
		n, err := store.Replay(ctx, core.ReplayFilter{IDs: ids})
		if err != nil {
			return sum, fmt.Errorf("replay: %w", err)
		}
		relay.Wake()
		if err := waitFor(ctx, func() bool { return c.duplicates() >= int(n) }); err != nil {
			return sum, fmt.Errorf("waiting for %d replayed events: %w", n, err)
		}
		fmt.Fprintf(out, "replayed %d events: the consumer suppressed them as duplicates\n", n)
	}
	if err := waitFor(ctx, func() bool {
		st, err := store.Stats(ctx)
		return err == nil && st.Pending == 0
	}); err != nil {
		return sum, fmt.Errorf("waiting for the outbox to settle: %w", err)
	}

	st, err := store.Stats(ctx)
	if err != nil {
		return sum, err
	}
	sum = c.fill(sum, qs)
	sum.Pending, sum.OutboxDeadLettered = st.Pending, st.DeadLettered
	// The database has the last word on effects: count the invoices, and
	// those written more than once.
	var invoices, twice int
	err = pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE applied > 1) FROM "+c.table).Scan(&invoices, &twice)
	if err != nil {
		return sum, fmt.Errorf("count invoices: %w", err)
	}
	sum.Applied, sum.DoubleApplied = invoices, twice
	sum.Elapsed = time.Since(start)
	printSummary(out, sum)
	return sum, nil
}

// connect opens a pool and checks the server answers, turning the usual
// failure into a message that says what to do. postgres.NewPool is
// pgxpool.New's pool, except through a pooler such as PgBouncer, where
// its statements survive transaction mode.
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if _, err := pgxpool.ParseConfig(url); err != nil {
		return nil, fmt.Errorf("DATABASE_URL %q is not a PostgreSQL URL: %v", redact(url), err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := postgres.NewPool(pctx, withMaxConns(url, 16))
	if err == nil {
		err = pool.Ping(pctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s (%v): start it (e.g. pg_ctlcluster 15 main start) or point DATABASE_URL at one", redact(url), oneLine(err))
	}
	return pool, nil
}

func setupSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
		return fmt.Errorf("reset schema: %w", err)
	}
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	_, err := pool.Exec(ctx, `
		CREATE TABLE `+s+`.orders (id bigint PRIMARY KEY, total_cents integer NOT NULL, placed_at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE `+s+`.invoices (order_id bigint PRIMARY KEY, amount_cents integer NOT NULL, applied integer NOT NULL DEFAULT 1)`)
	if err != nil {
		return fmt.Errorf("create business tables: %w", err)
	}
	return nil
}

// consumer is the invoicing service: it turns order.placed into an invoice.
type consumer struct {
	table     string
	failEvery int

	mu        sync.Mutex
	committed map[int64]time.Time // order ID → producer's commit time
	ids       []core.ID
	applied   map[int64]int
	latencies []time.Duration
	retriedOK int
	failed    int
	dupes     int
	changed   chan struct{}
}

func newConsumer(schema string, failEvery int) *consumer {
	return &consumer{
		table: pgx.Identifier{schema, "invoices"}.Sanitize(), failEvery: failEvery,
		committed: map[int64]time.Time{}, applied: map[int64]int{}, changed: make(chan struct{}),
	}
}

type orderPlaced struct {
	OrderID    int64 `json:"order_id"`
	TotalCents int   `json:"total_cents"`
}

func (c *consumer) placeOrder(ctx context.Context, pool *pgxpool.Pool, store *postgres.Store, id, total int) error {
	e, err := core.NewEvent("order.placed", orderPlaced{OrderID: int64(id), TotalCents: total})
	if err != nil {
		return err
	}
	e.Source, e.AggregateType, e.AggregateID = "quickstart/orders", "order", fmt.Sprint(id)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		orders := strings.Replace(c.table, `"invoices"`, `"orders"`, 1)
		if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, total_cents) VALUES ($1, $2)", id, total); err != nil {
			return err
		}
		return store.Add(ctx, tx, e)
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.committed[int64(id)] = time.Now()
	c.ids = append(c.ids, e.ID)
	c.mu.Unlock()
	return nil
}

// applyOrder is the effect. It runs in the deduper's transaction, so the
// invoice and the record that this event was applied commit together.
func (c *consumer) applyOrder(ctx context.Context, tx pgx.Tx, e core.Event) error {
	var o orderPlaced
	if err := decodeJSON(e.Payload, &o); err != nil {
		return core.Permanent(fmt.Errorf("order.placed payload: %w", err))
	}
	if o.TotalCents < 0 {
		return core.Permanent(fmt.Errorf("order %d has a negative total", o.OrderID))
	}
	if d, ok := qstash.DeliveryFromContext(ctx); ok && d.Retried == 0 && c.failEvery > 0 && o.OrderID%int64(c.failEvery) == 0 {
		c.mu.Lock()
		c.failed++
		c.mu.Unlock()
		return errors.New("invoicing is briefly unavailable") // QStash retries
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+c.table+" (order_id, amount_cents) VALUES ($1, $2) ON CONFLICT (order_id) DO UPDATE SET applied = "+c.table+".applied + 1", o.OrderID, o.TotalCents)
	return err
}

// decision is the receiver's hook: it runs after the effect committed.
func (c *consumer) decision(_ context.Context, d qstash.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch d.Outcome {
	case qstash.OutcomeApplied:
		var o orderPlaced
		if decodeJSON(d.Event.Payload, &o) == nil {
			c.applied[o.OrderID]++
			if t, ok := c.committed[o.OrderID]; ok {
				c.latencies = append(c.latencies, time.Since(t))
			}
		}
		if d.Delivery.Retried > 0 {
			c.retriedOK++
		}
	case qstash.OutcomeDuplicate:
		c.dupes++
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *consumer) appliedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.applied)
}

func (c *consumer) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dupes
}

func (c *consumer) firstIDs(n int) []core.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Skip the poison order's event: replaying it would only dead-letter it
	// again.
	return slices.Clone(c.ids[:min(n, len(c.ids)/2-1)])
}

// waitProgress waits until want orders are applied and done() holds,
// printing a progress line at most every 250ms.
func (c *consumer) waitProgress(ctx context.Context, out io.Writer, want int, done func() bool) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := -1
	for {
		n := c.appliedCount()
		if n >= want && done() {
			fmt.Fprintf(out, "  delivered %d/%d\n", n, want)
			return nil
		}
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-tick.C:
			if n != last {
				fmt.Fprintf(out, "  delivered %d/%d\n", n, want)
				last = n
			}
		}
	}
}

func (c *consumer) fill(s summary, qs *qstashdev.Server) summary {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.Applied = len(c.applied)
	for _, n := range c.applied {
		if n > 1 {
			s.DoubleApplied++
		}
	}
	s.RetriedOK, s.FailedAttempts, s.Duplicates = c.retriedOK, c.failed, c.dupes
	s.DeadLettered = len(qs.DLQ())
	lat := slices.Clone(c.latencies)
	slices.Sort(lat)
	if len(lat) > 0 {
		s.P50 = lat[len(lat)*50/100]
		s.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return s
}

func printSummary(out io.Writer, s summary) {
	fmt.Fprintf(out, `
summary
  orders placed            %d
  delivered and applied    %d
  retried (then applied)   %d   (first attempts failed on purpose: %d)
  duplicates suppressed    %d
  dead-lettered            %d   (QStash DLQ; outbox dead letters: %d)
  lost                     %d
  applied twice            %d
  latency commit→effect    p50 %s  p99 %s
  elapsed                  %s
`, s.Orders, s.Applied, s.RetriedOK, s.FailedAttempts, s.Duplicates, s.DeadLettered, s.OutboxDeadLettered,
		s.Orders-s.Poison-s.Applied, s.DoubleApplied, s.P50.Round(100*time.Microsecond), s.P99.Round(100*time.Microsecond), s.Elapsed.Round(time.Millisecond))
}

// serve serves h on a free loopback port.
func serve(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// serveLazy serves the handler made by mk at path on a free loopback port;
// mk learns the endpoint's URL first, because the receiver must know the
// exact URL QStash signs.
func serveLazy(mk func(url string) (http.Handler, error), path string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	url := "http://" + ln.Addr().String() + path
	h, err := mk(url)
	if err != nil {
		ln.Close()
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return url, func() { _ = srv.Close() }, nil
}

func waitFor(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || scheme > at {
		return url
	}
	if colon := strings.Index(url[scheme+3:at], ":"); colon >= 0 {
		return url[:scheme+3+colon] + ":***" + url[at:]
	}
	return url
}

// withMaxConns bounds the pool at n connections unless url does.
func withMaxConns(url string, n int) string {
	switch {
	case strings.Contains(url, "pool_max_conns"):
		return url
	case strings.Contains(url, "://") && strings.Contains(url, "?"):
		return url + "&pool_max_conns=" + fmt.Sprint(n)
	case strings.Contains(url, "://"):
		return url + "?pool_max_conns=" + fmt.Sprint(n)
	}
	return url + " pool_max_conns=" + fmt.Sprint(n)
}

// oneLine folds a multi-line driver error into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
