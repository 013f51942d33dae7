// Command database-sql is the quickstart for a service whose data layer is
// database/sql: one *sql.DB, opened with lib/pq, runs everything.
//
//	go run ./examples/database-sql
//
// It migrates its own schema (outboxkit_database_sql, recreated each run)
// through the *sql.DB, writes each order row and its event in one *sql.Tx
// (store.Add(ctx, postgres.SQL(tx), e)), shows that a rolled-back
// transaction leaves neither, relays the events through an in-process
// QStash (qstashdev) to a consumer whose effect writes in the deduper's
// *sql.Tx (postgres.SQLEffect), and replays a few events, which the deduper
// suppresses. It exits non-zero unless every order's effect was applied
// exactly once.
//
// DATABASE_URL selects the database; the default is the local server.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lib/pq" // registers the "postgres" driver

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

type options struct {
	DatabaseURL string
	Schema      string
	Orders      int
	Replay      int // events replayed after delivery, suppressed by the deduper
	Timeout     time.Duration
	Out         io.Writer
}

func main() {
	opts := options{Out: os.Stdout}
	flag.StringVar(&opts.DatabaseURL, "database-url", envOr("DATABASE_URL", defaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	flag.StringVar(&opts.Schema, "schema", "outboxkit_database_sql", "schema to (re)create for this run")
	flag.IntVar(&opts.Orders, "orders", 50, "orders to place")
	flag.IntVar(&opts.Replay, "replay", 5, "events to replay after delivery")
	flag.DurationVar(&opts.Timeout, "timeout", time.Minute, "give up after this long")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "database-sql:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

type orderPlaced struct {
	OrderID    int64 `json:"order_id"`
	TotalCents int   `json:"total_cents"`
}

func run(ctx context.Context, opts options) error {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	out := opts.Out

	db, err := open(ctx, opts.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	orders, invoices, err := setupSchema(ctx, db, opts.Schema)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "schema %s migrated through database/sql (lib/pq)\n", opts.Schema)

	// The store (the writers' and the relay's) and the deduper run on the
	// same *sql.DB; a Store on a *sql.DB claims and settles through it.
	// database/sql has no LISTEN, so the relay polls: WakeupPoll says it is
	// meant. Config.WakeupURL would give the store a wake-up connection.
	store, err := postgres.New(db, &postgres.Config{Schema: opts.Schema, Wakeup: postgres.WakeupPoll})
	if err != nil {
		return err
	}
	dedup, err := postgres.NewDeduper(db, &postgres.DeduperConfig{Schema: opts.Schema})
	if err != nil {
		return err
	}

	// The consumer: the effect receives the deduper's *sql.Tx, so the
	// invoice and the record that this event was processed commit together.
	mux := core.NewMux()
	mux.Register("order.placed", postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
		var o orderPlaced
		if err := json.Unmarshal(e.Payload, &o); err != nil {
			return core.Permanent(err)
		}
		// applied counts the times the effect committed: it must end at 1.
		_, err := tx.ExecContext(ctx, `INSERT INTO `+invoices+` (order_id, amount_cents) VALUES ($1, $2)
			ON CONFLICT (order_id) DO UPDATE SET applied = `+invoices+`.applied + 1`, o.OrderID, o.TotalCents)
		return err
	}))
	var duplicates atomic.Int64
	qs, err := qstashdev.New(qstashdev.Config{DeduplicationWindow: time.Millisecond}) // so the replay reaches the consumer
	if err != nil {
		return err
	}
	qsURL, stopQS, err := serve(qs.Handler(), "", nil)
	if err != nil {
		return err
	}
	defer func() { _ = qs.Close(); stopQS() }()
	consumerURL, stopConsumer, err := serve(nil, "/orders", func(url string) (http.Handler, error) {
		return qstash.NewReceiver(&qstash.ReceiverConfig{
			CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
			NextSigningKey:    qstashdev.DefaultNextSigningKey,
			URL:               url, // the URL QStash signs
			Handler:           mux,
			Deduper:           dedup,
			Consumer:          "invoicing",
			OnDecision: func(_ context.Context, d qstash.Decision) {
				if d.Outcome == qstash.OutcomeDuplicate {
					duplicates.Add(1)
				}
			},
		})
	})
	if err != nil {
		return err
	}
	defer stopConsumer()

	// The relay: core.Relay over the *sql.DB store, publishing to QStash.
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{BaseURL: qsURL, Token: qstashdev.DefaultToken, Destination: qstash.Target{URL: consumerURL}})
	if err != nil {
		return err
	}
	defer pub.Close()
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{PollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	defer func() { stopRelay(); <-relayDone }()

	// The writers: the order row and its event in one *sql.Tx.
	var ids []core.ID
	for i := 1; i <= opts.Orders; i++ {
		id, err := placeOrder(ctx, db, store, orders, int64(i), 1000+i, true)
		if err != nil {
			return fmt.Errorf("place order %d: %w", i, err)
		}
		ids = append(ids, id)
	}
	// A transaction rolled back after Add: neither its order nor its event
	// exists afterwards, so nothing is ever published for it.
	rolledBack, err := placeOrder(ctx, db, store, orders, 0, 1, false)
	if err != nil {
		return fmt.Errorf("rolled-back order: %w", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+orders+` WHERE id = 0`).Scan(&n); err != nil {
		return err
	}
	if _, err := store.Get(ctx, rolledBack); n != 0 || !errors.Is(err, postgres.ErrNotFound) {
		return fmt.Errorf("the rolled-back transaction left %d order rows and its event (Get: %v)", n, err)
	}
	fmt.Fprintf(out, "placed %d orders; a rolled-back one left no row and no event\n", opts.Orders)

	// Wait for every invoice, then replay some events: the deduper
	// suppresses them.
	if err := waitFor(ctx, func() bool { return count(ctx, db, invoices) >= opts.Orders }); err != nil {
		return fmt.Errorf("waiting for %d invoices (have %d): %w", opts.Orders, count(ctx, db, invoices), err)
	}
	replayed, err := store.Replay(ctx, core.ReplayFilter{IDs: ids[:min(opts.Replay, len(ids))]})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	relay.Wake()
	if err := waitFor(ctx, func() bool { return duplicates.Load() >= replayed }); err != nil {
		return fmt.Errorf("waiting for %d replayed events (%d suppressed): %w", replayed, duplicates.Load(), err)
	}
	if err := waitFor(ctx, func() bool { st, err := store.Stats(ctx); return err == nil && st.Pending == 0 }); err != nil {
		return fmt.Errorf("waiting for the outbox to settle: %w", err)
	}

	// The database has the last word: one invoice per order, each applied once.
	var applied, twice int
	err = db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE applied > 1) FROM `+invoices).Scan(&applied, &twice)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "invoices %d of %d orders, applied twice %d, replayed %d (suppressed %d)\n", applied, opts.Orders, twice, replayed, duplicates.Load())
	if applied != opts.Orders || twice != 0 {
		return fmt.Errorf("FAILED: %d invoices for %d orders, %d applied more than once", applied, opts.Orders, twice)
	}
	fmt.Fprintln(out, "OK: every order's effect applied exactly once")
	return nil
}

// placeOrder writes an order and its event in one *sql.Tx and commits it,
// or rolls it back when commit is false. It returns the event's ID.
func placeOrder(ctx context.Context, db *sql.DB, store *postgres.Store, orders string, id int64, total int, commit bool) (core.ID, error) {
	e, err := core.NewEvent("order.placed", orderPlaced{OrderID: id, TotalCents: total})
	if err != nil {
		return core.ID{}, err
	}
	e.AggregateType, e.AggregateID = "order", fmt.Sprint(id)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return core.ID{}, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+orders+` (id, total_cents) VALUES ($1, $2)`, id, total); err != nil {
		return core.ID{}, err
	}
	// postgres.SQL(tx) is the *sql.Tx seen as the pgx.Tx Add takes: the
	// event is written in tx, and commits or rolls back with the order.
	if err := store.Add(ctx, postgres.SQL(tx), e); err != nil {
		return core.ID{}, err
	}
	if !commit {
		return e.ID, tx.Rollback()
	}
	return e.ID, tx.Commit()
}

// open opens the *sql.DB and checks the server answers, turning the usual
// failure into a message that says what to do.
func open(ctx context.Context, url string) (*sql.DB, error) {
	db, err := sql.Open("postgres", url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a PostgreSQL URL: %v", err)
	}
	db.SetMaxOpenConns(16)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at DATABASE_URL (%s): start it (e.g. pg_ctlcluster 15 main start) or point DATABASE_URL at one", strings.Join(strings.Fields(err.Error()), " "))
	}
	return db, nil
}

// setupSchema recreates the schema, runs outboxkit's migrations through
// the *sql.DB and creates the business tables, returning their names.
func setupSchema(ctx context.Context, db *sql.DB, schema string) (orders, invoices string, err error) {
	s := pq.QuoteIdentifier(schema)
	if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
		return "", "", fmt.Errorf("reset schema: %w", err)
	}
	if err := postgres.Migrate(ctx, db, &postgres.MigrateConfig{Schema: schema}); err != nil {
		return "", "", fmt.Errorf("migrate: %w", err)
	}
	orders, invoices = s+".orders", s+".invoices"
	_, err = db.ExecContext(ctx, `
		CREATE TABLE `+orders+` (id bigint PRIMARY KEY, total_cents integer NOT NULL);
		CREATE TABLE `+invoices+` (order_id bigint PRIMARY KEY, amount_cents integer NOT NULL, applied integer NOT NULL DEFAULT 1)`)
	if err != nil {
		return "", "", fmt.Errorf("create business tables: %w", err)
	}
	return orders, invoices, nil
}

func count(ctx context.Context, db *sql.DB, table string) int {
	var n int
	_ = db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	return n
}

// serve serves h, or the handler mk makes once it knows its URL (the
// receiver must know the exact URL QStash signs), at path on a free
// loopback port.
func serve(h http.Handler, path string, mk func(url string) (http.Handler, error)) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	url := "http://" + ln.Addr().String() + path
	if mk != nil {
		rh, err := mk(url)
		if err != nil {
			ln.Close()
			return "", nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("POST "+path, rh)
		h = mux
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
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
