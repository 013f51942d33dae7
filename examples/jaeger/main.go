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
// and service name, as three deployments would: the shop writes orders into
// an in-memory outbox, a relay publishes them to qstashdev (a local QStash)
// over HTTP, and qstashdev delivers them, signed, to the shipping service's
// qstash.Receiver. Only the trace context in the events' headers ties the
// spans together.
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

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
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

func main() {
	endpoint := flag.String("otlp-endpoint", "localhost:4318", `OTLP/HTTP collector (host:port), plain HTTP; "" exports nothing (a smoke run)`)
	orders := flag.Int("orders", 3, "orders to place")
	flag.Parse()
	if err := run(*endpoint, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "jaeger example:", err)
		os.Exit(1)
	}
}

func run(endpoint string, orders int) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// W3C trace context and baggage: what goes into event headers.
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

	var providers []*sdktrace.TracerProvider
	newProvider := func(service string) (*sdktrace.TracerProvider, error) {
		opts := []sdktrace.TracerProviderOption{
			sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service))),
		}
		if endpoint != "" {
			exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
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
				err = fmt.Errorf("export spans to %s: %w", endpoint, ferr)
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

	// A local QStash.
	dev, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		return err
	}
	defer dev.Close()
	devLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = dev.Serve(devLn) }()

	// The shipping service: a QStash receiver whose handler is traced.
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
	mux := core.NewMux()
	mux.RegisterFunc("order.placed", func(ctx context.Context, e core.Event) error {
		_, span := shippingTP.Tracer("shipping").Start(ctx, "ship order")
		defer span.End()
		time.Sleep(5 * time.Millisecond) // the work, so the span has a width in the UI
		if shipped.Add(1) == int64(orders) {
			close(allShipped)
		}
		return nil
	})
	receiver, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               hookURL,
		Handler:           core.ChainHandler(mux, tracing.HandlerMiddleware(shippingOpts...)),
		Deduper:           tracing.Deduper(memory.NewDeduper(), shippingOpts...),
		Consumer:          "shipping",
	})
	if err != nil {
		return err
	}
	recvSrv := &http.Server{Handler: receiver, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = recvSrv.Serve(recvLn) }()
	defer recvSrv.Close()

	// The relay: outbox → QStash, one producer span per event.
	store := memory.NewStore(nil)
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

	// The shop: each order is a request that writes an event. The injector
	// would be the store's write hook with PostgreSQL; the memory store has
	// none, so the handler calls it.
	inject := tracing.NewInjector(tracing.WithPropagators(prop))
	shop := shopTP.Tracer("shop")
	for i := 1; i <= orders; i++ {
		reqCtx, req := shop.Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
		e, err := core.NewEvent("order.placed", map[string]int{"order": i})
		if err != nil {
			req.End()
			return err
		}
		e.AggregateType, e.AggregateID = "order", fmt.Sprint(i)
		_, write := shop.Start(reqCtx, "insert order and outbox event")
		inject(reqCtx, &e)
		err = store.Add(reqCtx, e)
		write.End()
		req.End()
		if err != nil {
			return err
		}
		fmt.Printf("order %d: event %s trace %s\n", i, e.ID, req.SpanContext().TraceID())
	}

	select {
	case <-allShipped:
	case <-ctx.Done():
		return fmt.Errorf("shipped %d of %d orders: %w", shipped.Load(), orders, ctx.Err())
	}
	// Let the relay settle its last batch before reading the metrics.
	if err := waitSettled(ctx, store); err != nil {
		return err
	}
	var rm metricdata.ResourceMetrics
	if err := metrics.Collect(ctx, &rm); err != nil {
		return err
	}
	fmt.Printf("shipped %d orders; %s=%d, %s=%d\n", shipped.Load(),
		tracing.MetricEventsSettled, sumInt(rm, tracing.MetricEventsSettled),
		tracing.MetricEventsPending, sumInt(rm, tracing.MetricEventsPending))
	if endpoint == "" {
		fmt.Println("no collector given: spans were not exported")
	} else {
		fmt.Printf("traces exported to %s; services %s, %s, %s\n", endpoint, shopService, relayService, shippingService)
	}
	return nil
}

// waitSettled waits until the store has nothing pending.
func waitSettled(ctx context.Context, store *memory.Store) error {
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
