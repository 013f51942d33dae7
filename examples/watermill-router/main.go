// Command watermill-router runs the outbox in front of a Watermill Router:
//
//	PostgreSQL outbox ──relay──▶ NATS JetStream ──▶ Watermill Router ──▶ handler
//	(TxPublisher, in the          (watermill-nats)   (CorrelationID,      (effect + dedupe
//	 order's transaction)                              PoisonQueue, Retry,   in one PostgreSQL
//	                                                   Recoverer)            transaction)
//
// It places orders, each in a transaction that also publishes a Watermill
// message through outboxwatermill.TxPublisher (so the message exists if and
// only if the order does), relays the outbox to NATS with
// outboxwatermill.Publisher, and consumes with a Router whose handler ships
// each order exactly once through the postgres Deduper. Some deliveries fail
// on purpose: one with a transient error and one with a panic (both retried
// by the Retry middleware), one order is invalid (poison queue), and one
// transaction rolls back (never delivered). Finally it replays every shipped
// event, as an operator might after an incident, and the deduper suppresses
// all of them.
//
// It prints a summary and exits non-zero if any committed order was lost or
// shipped twice. It needs PostgreSQL (DATABASE_URL) and NATS with JetStream
// (NATS_URL); the defaults are the local services CI starts. Everything it
// creates (a schema, a stream) is its own and removed on exit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/tracing"
)

// config is where the services are and how much to do.
type config struct {
	DatabaseURL string
	NATSURL     string
	// Orders is how many orders to place, one of them invalid.
	Orders int
	// Log receives progress lines.
	Log io.Writer
}

func configFromEnv() config {
	c := config{
		DatabaseURL: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		NATSURL:     "nats://127.0.0.1:4222",
		Orders:      50,
		Log:         os.Stdout,
	}
	if v := os.Getenv("DATABASE_URL"); v != "" {
		c.DatabaseURL = v
	}
	if v := os.Getenv("NATS_URL"); v != "" {
		c.NATSURL = v
	}
	return c
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := run(ctx, configFromEnv())
	if s != nil {
		s.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "watermill-router:", err)
		os.Exit(1)
	}
}

// summary is what happened.
type summary struct {
	Committed      int           // orders committed (each with its event)
	RolledBack     int           // orders rolled back (their events must never arrive)
	Shipped        int           // shipment rows: effects applied
	Poisoned       int           // orders in the poison queue
	Retried        int           // handler retries by the Retry middleware
	Replayed       int64         // shipped events replayed from the outbox
	Duplicates     int           // deliveries the deduper suppressed
	BadCorrelation int           // messages whose correlation ID did not survive
	Lost           int           // committed orders neither shipped nor poisoned
	Elapsed        time.Duration // wall time
}

func (s *summary) print(w io.Writer) {
	fmt.Fprintf(w, `watermill-router: outbox → NATS JetStream → Watermill Router
  orders committed                 %d (+%d rolled back)
  shipped, each exactly once       %d
  poisoned (invalid order)         %d
  retried by the Retry middleware  %d
  replayed from the outbox         %d
  duplicates suppressed            %d
  correlation IDs lost             %d
  lost                             %d
  elapsed                          %s
`, s.Committed, s.RolledBack, s.Shipped, s.Poisoned, s.Retried, s.Replayed, s.Duplicates, s.BadCorrelation, s.Lost, s.Elapsed.Round(time.Millisecond))
}

// ErrLoss is returned when an order was lost or applied twice.
var ErrLoss = errors.New("orders lost or applied twice")

// run is the whole program, returning what happened; main prints it.
func run(ctx context.Context, cfg config) (*summary, error) {
	start := time.Now()
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, format+"\n", args...) }
	suffix := strings.ReplaceAll(core.NewID().String(), "-", "")[24:]

	// PostgreSQL: the outbox, the deduper's table and the business tables,
	// in a schema of this run's own.
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	schema := "wmr_" + suffix
	if err := setupSchema(ctx, pool, schema); err != nil {
		return nil, err
	}
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}()
	store, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	deduper, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: schema})
	if err != nil {
		return nil, err
	}

	// NATS: a JetStream stream of this run's own. Topics are NATS subjects
	// under it; the event's Destination (the topic TxPublisher was given)
	// becomes the subject the relay publishes to.
	stream := "WMR_" + strings.ToUpper(suffix)
	ordersTopic, poisonTopic := stream+".orders", stream+".poison"
	if err := createStream(cfg.NATSURL, stream); err != nil {
		return nil, err
	}
	defer deleteStream(cfg.NATSURL, stream)
	wmLogger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	jsConfig := wmnats.JetStreamConfig{
		// Every message of the stream, explicitly acknowledged. A production
		// consumer sets DurablePrefix (or DurableCalculator) so its position
		// survives restarts; this run's stream dies with it. TrackMsgId
		// (JetStream's own duplicate window, keyed by the message UUID, which
		// is the event ID) would drop the replay below before it reached the
		// deduper: the deduper is what holds for any window, so the replay
		// shows it.
		SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit()},
	}
	natsPub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: cfg.NATSURL, JetStream: jsConfig}, wmLogger)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	defer natsPub.Close()
	natsSub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL: cfg.NATSURL, SubscribersCount: 1, AckWaitTimeout: 30 * time.Second,
		CloseTimeout: 5 * time.Second, JetStream: jsConfig,
	}, wmLogger)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	defer natsSub.Close()

	// The relay: outbox → NATS. The store's LISTEN/NOTIFY wakes it as soon
	// as an order commits.
	bridge, err := outboxwatermill.NewPublisher(natsPub, nil)
	if err != nil {
		return nil, err
	}
	relay, err := core.NewRelay(store, bridge, &core.RelayConfig{PollInterval: 200 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	defer func() { stopRelay(); <-relayDone }()

	// The consumer: a Router.
	shipping := &shipping{deduper: deduper, schema: schema}
	router, err := newRouter(shipping, natsSub, natsPub, ordersTopic, poisonTopic, wmLogger)
	if err != nil {
		return nil, err
	}
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	defer func() { _ = router.Close(); <-routerDone }()
	select {
	case <-router.Running():
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	// The producer: each order and its message in one transaction.
	s := &summary{}
	for i := range cfg.Orders {
		o := order{ID: fmt.Sprintf("order-%03d", i), Quantity: 1 + i%3}
		switch i {
		case 3:
			o.Flaky = true // fails once, after writing: its transaction rolls back
		case 7:
			o.Panics = true // panics once: Recoverer, then Retry
		case cfg.Orders - 1:
			o.Quantity = 0 // invalid: straight to the poison queue
		}
		if err := placeOrder(ctx, pool, store, schema, ordersTopic, o, true); err != nil {
			return s, err
		}
		s.Committed++
	}
	if err := placeOrder(ctx, pool, store, schema, ordersTopic, order{ID: "order-rolled-back", Quantity: 1}, false); !errors.Is(err, errRollback) {
		return s, fmt.Errorf("rolled-back order: %v", err)
	}
	s.RolledBack++
	logf("placed %d orders (+1 rolled back)", s.Committed)

	// Wait until every committed order is shipped or poisoned.
	if err := waitUntil(ctx, func() bool {
		st := shipping.stats()
		return st.applied+st.poisoned >= s.Committed
	}); err != nil {
		return s, fmt.Errorf("waiting for the orders: %w (%+v)", err, shipping.stats())
	}
	logf("all orders handled; replaying the shipped ones")

	// An operator replays the shipped events: at-least-once, made harmless.
	st := shipping.stats()
	s.Replayed, err = store.Replay(ctx, core.ReplayFilter{IDs: st.appliedIDs})
	if err != nil {
		return s, fmt.Errorf("replay: %w", err)
	}
	if err := waitUntil(ctx, func() bool { return int64(shipping.stats().duplicates) >= s.Replayed }); err != nil {
		return s, fmt.Errorf("waiting for the replay: %w (%+v)", err, shipping.stats())
	}

	st = shipping.stats()
	s.Poisoned, s.Retried, s.Duplicates, s.BadCorrelation = st.poisoned, st.retried, st.duplicates, st.badCorrelation
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "shipments"}.Sanitize()).Scan(&s.Shipped); err != nil {
		return s, err
	}
	s.Lost = s.Committed - s.Shipped - s.Poisoned
	s.Elapsed = time.Since(start)
	switch {
	case s.Lost != 0 || s.Shipped != st.applied:
		return s, fmt.Errorf("%w: %d committed, %d shipped (%d applications), %d poisoned", ErrLoss, s.Committed, s.Shipped, st.applied, s.Poisoned)
	case st.rolledBackSeen > 0:
		return s, fmt.Errorf("a rolled-back order was delivered %d time(s)", st.rolledBackSeen)
	case s.BadCorrelation > 0:
		return s, fmt.Errorf("%d message(s) lost their correlation ID", s.BadCorrelation)
	}
	return s, nil
}

// order is the business payload.
type order struct {
	ID       string `json:"id"`
	Quantity int    `json:"quantity"`
	// Flaky and Panics make the handler fail the first delivery, to show
	// the Retry and Recoverer middleware at work.
	Flaky  bool `json:"flaky,omitempty"`
	Panics bool `json:"panics,omitempty"`
}

// placeOrder writes the order and publishes its message in one
// transaction, committed or (commit false) rolled back. The publishing
// code is plain Watermill: only the publisher is transactional.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, store *postgres.Store, schema, topic string, o order, commit bool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "orders"}.Sanitize()+" (id, quantity) VALUES ($1, $2)", o.ID, o.Quantity); err != nil {
			return err
		}
		// BeforeAdd records each message's trace context in its event, so
		// that a traced service's consumers join the producer's trace.
		pub, err := outboxwatermill.NewTxPublisher[postgres.DBTX](store, tx, &outboxwatermill.TxPublisherConfig{
			BeforeAdd: tracing.NewInjector(),
		})
		if err != nil {
			return err
		}
		payload, err := json.Marshal(o)
		if err != nil {
			return err
		}
		// A UUID v7 keeps the outbox's primary key index compact; any UUID
		// works.
		msg := message.NewMessageWithContext(ctx, core.NewID().String(), payload)
		msg.Metadata.Set(core.HeaderType, "order.placed")
		middleware.SetCorrelationID(o.ID, msg)
		if err := pub.Publish(topic, msg); err != nil {
			return err
		}
		if !commit {
			return errRollback
		}
		return nil
	})
}

var errRollback = errors.New("rolled back on purpose")

func setupSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, `
CREATE TABLE `+q+`.orders (id text PRIMARY KEY, quantity int NOT NULL);
CREATE TABLE `+q+`.shipments (
	order_id text PRIMARY KEY REFERENCES `+q+`.orders (id),
	event_id uuid NOT NULL UNIQUE,
	shipped_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return fmt.Errorf("create business tables: %w", err)
	}
	return nil
}

func createStream(url, name string) error {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	_, err = js.AddStream(&nats.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: nats.MemoryStorage})
	if err != nil {
		return fmt.Errorf("create JetStream stream (is JetStream enabled?): %w", err)
	}
	return nil
}

func deleteStream(url, name string) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	if js, err := nc.JetStream(); err == nil {
		_ = js.DeleteStream(name)
	}
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
