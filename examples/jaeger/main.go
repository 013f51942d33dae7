// Command jaeger runs the order flow end to end with OpenTelemetry tracing
// and exports the traces to Jaeger (or any OTLP/HTTP collector), so you can
// see one trace per order: the shop's request, the relay's publish and the
// shipping service's processing, across three services.
//
//	jaeger &                       # all-in-one: OTLP on :4318, UI on :16686
//	go run ./examples/jaeger
//	open http://localhost:16686    # service "shop-api", pick a trace
//
// Everything runs in one process, but each part has its own tracer provider
// and service name, as three deployments would. The shop writes each order
// and its event in one transaction to the PostgreSQL outbox, whose BeforeAdd
// hook (tracing.NewInjector) records the request's trace context in the
// event: the shop's code only calls Add. A relay publishes the events to
// qstashdev (a local QStash) over HTTP, and qstashdev delivers them, signed,
// to the shipping service's qstash.Receiver, whose Middleware
// (tracing.HandlerMiddleware) gives every delivery a consumer span and whose
// Deduper (the PostgreSQL one, wrapped by tracing.Deduper) records on it
// whether the effect ran. Only the trace context in the events' headers ties
// the spans together.
//
// Finally an operator replays the first order's event: it is delivered
// again, and its trace gains a second publish and a second consumer span,
// marked outboxkit.dedupe.applied=false, with no shipping work under it.
//
// It needs PostgreSQL: DATABASE_URL (or -database-url) selects it, the
// default being the local server; the schema (-schema) is recreated on each
// run. -otlp-endpoint= runs it without exporting anything.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
	"github.com/outboxkit/outboxkit/tracing"
)

// Service names, as they appear in Jaeger.
const (
	shopService     = "shop-api"
	relayService    = "outbox-relay"
	shippingService = "shipping"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// options are the knobs of a run; main reads them from flags.
type options struct {
	endpoint    string
	databaseURL string
	schema      string
	orders      int
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "otlp-endpoint", "localhost:4318", `OTLP/HTTP collector (host:port), plain HTTP; "" exports nothing (a smoke run)`)
	flag.StringVar(&o.databaseURL, "database-url", envOr("DATABASE_URL", defaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	flag.StringVar(&o.schema, "schema", "outboxkit_jaeger", "schema to (re)create for this run")
	flag.IntVar(&o.orders, "orders", 3, "orders to place")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "jaeger example:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(o options) (err error) {
	if o.orders < 1 {
		return fmt.Errorf("-orders %d: place at least one", o.orders)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Deferred first, so it runs last: everything below uses the pool.
	pool, err := connect(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setupSchema(ctx, pool, o.schema); err != nil {
		return err
	}

	// W3C trace context and baggage: what goes into event headers.
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

	var providers []*sdktrace.TracerProvider
	newProvider := func(service string) (*sdktrace.TracerProvider, error) {
		opts := []sdktrace.TracerProviderOption{
			sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service))),
		}
		if o.endpoint != "" {
			exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(o.endpoint), otlptracehttp.WithInsecure())
			if err != nil {
				return nil, fmt.Errorf("OTLP exporter for %s: %w", service, err)
			}
			opts = append(opts, sdktrace.WithBatcher(exp))
		}
		tp := sdktrace.NewTracerProvider(opts...)
		providers = append(providers, tp)
		return tp, nil
	}
	// Flush every span before exiting, whatever happened: a trace missing
	// its last spans is the confusing kind. A collector that cannot be
	// reached fails the run, so a check never mistakes silence for success.
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		for _, tp := range providers {
			ferr := tp.ForceFlush(sctx)
			if serr := tp.Shutdown(sctx); ferr == nil {
				ferr = serr
			}
			if ferr != nil && err == nil {
				err = fmt.Errorf("export spans to %s: %w", o.endpoint, ferr)
			}
		}
	}()
	shopTP, err := newProvider(shopService)
	if err != nil {
		return err
	}
	relayTP, err := newProvider(relayService)
	if err != nil {
		return err
	}
	shippingTP, err := newProvider(shippingService)
	if err != nil {
		return err
	}

	// Metrics stay in process here; a real program would export them too.
	metrics := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	// A local QStash. Real QStash answers a republished event "deduplicated"
	// for ten minutes (the event ID is the deduplication ID), so the replay
	// at the end would never reach the shipping service; a window of a
	// nanosecond lets it through, to show the consumer's own deduplication.
	dev, err := qstashdev.New(qstashdev.Config{DeduplicationWindow: time.Nanosecond})
	if err != nil {
		return err
	}
	defer dev.Close()
	devLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = dev.Serve(devLn) }()

	// The shipping service: a QStash receiver. Its Middleware runs outside
	// the Deduper, so every delivery, duplicates included, gets a consumer
	// span, on which tracing.Deduper records whether the effect ran.
	shippingOpts := []tracing.Option{
		tracing.WithTracerProvider(shippingTP), tracing.WithMeterProvider(mp),
		tracing.WithPropagators(prop), tracing.WithMessagingSystem("qstash"),
	}
	recvLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hookURL := "http://" + recvLn.Addr().String() + "/hooks/orders"
	shippingOpts = append(shippingOpts, tracing.WithDestination(func(core.Event) string { return hookURL }))
	var shipped atomic.Int64
	allShipped := make(chan struct{})
	shipments := pgx.Identifier{o.schema, "shipments"}.Sanitize()
	mux := core.NewMux()
	mux.RegisterFunc("order.placed", func(ctx context.Context, e core.Event) error {
		ctx, span := shippingTP.Tracer("shipping").Start(ctx, "ship order")
		defer span.End()
		time.Sleep(5 * time.Millisecond) // the work, so the span has a width in the UI
		// The shipment commits with the Deduper's record of the event.
		tx, ok := postgres.TxFromContext(ctx)
		if !ok {
			return core.Permanent(errors.New("no deduper transaction in the context"))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+shipments+` (event_id) VALUES ($1)`, e.ID.String()); err != nil {
			return err
		}
		if shipped.Add(1) == int64(o.orders) {
			close(allShipped)
		}
		return nil
	})
	deduper, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: o.schema})
	if err != nil {
		return err
	}
	duplicates := make(chan core.ID, 1)
	receiver, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               hookURL,
		Handler:           mux,
		Middleware:        []core.HandlerMiddleware{tracing.HandlerMiddleware(shippingOpts...)},
		Deduper:           tracing.Deduper(deduper, shippingOpts...),
		Consumer:          "shipping",
		OnDecision: func(_ context.Context, d qstash.Decision) {
			if d.Outcome == qstash.OutcomeDuplicate {
				select {
				case duplicates <- d.Event.ID:
				default:
				}
			}
		},
	})
	if err != nil {
		return err
	}
	recvSrv := &http.Server{Handler: receiver, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = recvSrv.Serve(recvLn) }()
	defer recvSrv.Close()

	// The outbox. BeforeAdd puts the caller's trace context on every event
	// it adds; the shop's code below never mentions tracing.
	store, err := postgres.New(pool, &postgres.Config{
		Schema:    o.schema,
		BeforeAdd: tracing.NewInjector(tracing.WithPropagators(prop)),
	})
	if err != nil {
		return err
	}

	// The relay: outbox → QStash, one producer span per event.
	relayOpts := []tracing.Option{
		tracing.WithTracerProvider(relayTP), tracing.WithMeterProvider(mp),
		tracing.WithPropagators(prop), tracing.WithMessagingSystem("qstash"),
		tracing.WithDestination(func(core.Event) string { return hookURL }),
	}
	unregister, err := tracing.RegisterStoreMetrics(store, relayOpts...)
	if err != nil {
		return err
	}
	defer func() { _ = unregister() }()
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     "http://" + devLn.Addr().String(),
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: hookURL},
	})
	if err != nil {
		return err
	}
	defer pub.Close()
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{
		PollInterval: 100 * time.Millisecond,
		Middleware:   []core.PublisherMiddleware{tracing.PublisherMiddleware(relayOpts...)},
		Hooks:        []core.RelayHook{tracing.RelayHook(relayOpts...)},
	})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	defer func() { stopRelay(); <-relayDone }()

	// The shop: each order is a request whose transaction writes the order
	// row and its event.
	shop := shopTP.Tracer("shop")
	orders := pgx.Identifier{o.schema, "orders"}.Sanitize()
	var first core.Event
	var firstTrace trace.TraceID
	for i := 1; i <= o.orders; i++ {
		reqCtx, req := shop.Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
		e, err := core.NewEvent("order.placed", map[string]int{"order": i})
		if err != nil {
			req.End()
			return err
		}
		e.AggregateType, e.AggregateID = "order", fmt.Sprint(i)
		// What a pgx tracer (otelpgx, say) would record. The transaction
		// runs under the request's ctx, so the event carries the request's
		// span and the relay's publish nests directly under it.
		_, write := shop.Start(reqCtx, "INSERT orders, outbox_events")
		err = pgx.BeginFunc(reqCtx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(reqCtx, `INSERT INTO `+orders+` (id) VALUES ($1)`, i); err != nil {
				return err
			}
			return store.Add(reqCtx, tx, e)
		})
		write.End()
		req.End()
		if err != nil {
			return fmt.Errorf("order %d: %w", i, err)
		}
		if i == 1 {
			first, firstTrace = e, req.SpanContext().TraceID()
		}
		fmt.Printf("order %d: event %s trace %s\n", i, e.ID, req.SpanContext().TraceID())
	}

	select {
	case <-allShipped:
	case <-ctx.Done():
		return fmt.Errorf("shipped %d of %d orders: %w", shipped.Load(), o.orders, ctx.Err())
	}

	// An operator replays the first order's event: the shipping service
	// receives it again and its Deduper suppresses the effect. Replay takes
	// published events only, so wait for the relay to settle them.
	if err := waitSettled(ctx, store); err != nil {
		return err
	}
	if n, err := store.Replay(ctx, core.ReplayFilter{IDs: []core.ID{first.ID}}); err != nil || n != 1 {
		return fmt.Errorf("replay event %s: replayed %d events: %v", first.ID, n, err)
	}
	select {
	case id := <-duplicates:
		if id != first.ID {
			return fmt.Errorf("duplicate delivery of event %s, want the replayed %s", id, first.ID)
		}
	case <-ctx.Done():
		return fmt.Errorf("the replayed event %s never reached the shipping service: %w", first.ID, ctx.Err())
	}
	fmt.Printf("replayed order 1: event %s trace %s delivered again, suppressed as a duplicate\n", first.ID, firstTrace)

	// Let the relay settle its last batch before reading the metrics.
	if err := waitSettled(ctx, store); err != nil {
		return err
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+shipments).Scan(&n); err != nil {
		return err
	}
	if n != o.orders {
		return fmt.Errorf("%d shipments for %d orders", n, o.orders)
	}
	var rm metricdata.ResourceMetrics
	if err := metrics.Collect(ctx, &rm); err != nil {
		return err
	}
	fmt.Printf("shipped %d orders; %s=%d, %s=%d, %s=%d\n", n,
		tracing.MetricEventsSettled, sumInt(rm, tracing.MetricEventsSettled),
		tracing.MetricEventsDuplicates, sumInt(rm, tracing.MetricEventsDuplicates),
		tracing.MetricEventsPending, sumInt(rm, tracing.MetricEventsPending))
	if o.endpoint == "" {
		fmt.Println("no collector given: spans were not exported")
	} else {
		fmt.Printf("traces exported to %s; services %s, %s, %s\n", o.endpoint, shopService, relayService, shippingService)
	}
	return nil
}

// connect opens a pool and checks that the server answers.
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("-database-url is not a PostgreSQL URL: %w", err)
	}
	cfg.MaxConns = 8
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err == nil {
		err = pool.Ping(pctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s:%d (%v): start it or point DATABASE_URL at one", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// setupSchema recreates schema with the outbox tables and the example's
// own: the shop's orders and the shipping service's shipments.
func setupSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
		return fmt.Errorf("reset schema %s: %w", schema, err)
	}
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `
		CREATE TABLE `+s+`.orders (id integer PRIMARY KEY, placed_at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE `+s+`.shipments (event_id text PRIMARY KEY, shipped_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create the example's tables: %w", err)
	}
	return nil
}

// waitSettled waits until the store has nothing pending.
func waitSettled(ctx context.Context, store *postgres.Store) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := store.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(errors.New("events still pending"), ctx.Err())
		case <-tick.C:
		}
	}
}

// sumInt adds up the points of an integer counter or gauge.
func sumInt(rm metricdata.ResourceMetrics, name string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					n += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}
