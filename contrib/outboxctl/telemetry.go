package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/tracing"
)

// telemetry is the relay's OpenTelemetry SDK: a meter provider read by the
// Prometheus registry behind /metrics (and by an OTLP exporter when the
// OTEL_* variables ask for one), and a tracer provider exporting spans
// through OTLP when asked (a no-op otherwise).
type telemetry struct {
	registry *prometheus.Registry
	mp       *sdkmetric.MeterProvider
	tp       trace.TracerProvider
	prop     propagation.TextMapPropagator
	// traces and metrics say where OTLP goes, for the start-up line.
	traces, metrics string
	stop            []func(context.Context) error
}

// otlpEnabled says whether the environment asks for an exporter of a
// signal. OpenTelemetry's default exporter is OTLP to localhost; a relay
// that nobody configured for it would log export failures forever, so
// OTLP is on only when an exporter or an endpoint is named.
func otlpEnabled(getenv func(string) string, exporterVar, signalEndpointVar string) bool {
	switch v := strings.TrimSpace(getenv(exporterVar)); v {
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv(signalEndpointVar) != ""
	case "none", "prometheus":
		// prometheus: the relay's own /metrics is that exporter.
		return false
	default:
		return true
	}
}

// otlpTarget describes an enabled exporter for the start-up line.
func otlpTarget(getenv func(string) string, exporterVar, protocolVar, signalEndpointVar string) string {
	if v := getenv(exporterVar); v != "" && v != "otlp" {
		return v
	}
	proto := envOr(getenv, protocolVar, envOr(getenv, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"))
	endpoint := envOr(getenv, signalEndpointVar, envOr(getenv, "OTEL_EXPORTER_OTLP_ENDPOINT", "the default endpoint"))
	return "otlp " + proto + " to " + displayURL(endpoint)
}

// newTelemetry builds the providers from the environment
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_EXPORTER,
// OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*; autoexport reads them).
// withMetrics false builds no meter provider (drain runs serve none).
func newTelemetry(ctx context.Context, getenv func(string) string, logger *slog.Logger, withMetrics bool) (*telemetry, error) {
	otel.SetErrorHandler(newOtelErrorHandler(logger))
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("outboxctl")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("OpenTelemetry resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %v", err)
	}
	t := &telemetry{
		prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		tp:     tracenoop.NewTracerProvider(),
		traces: "off", metrics: "off",
	}
	if otlpEnabled(getenv, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %v", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
			t.tp = tp
			t.stop = append(t.stop, tp.Shutdown)
			t.traces = otlpTarget(getenv, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
		}
	}
	if !withMetrics {
		return t, nil
	}
	t.registry = prometheus.NewRegistry()
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prom, err := otelprom.New(
		otelprom.WithRegisterer(t.registry),
		// Pinned, so metric names stay what docs and alert rules say
		// (outboxkit_events_oldest_pending_age_seconds) across exporter
		// versions.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("Prometheus exporter: %v", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	if otlpEnabled(getenv, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter (OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*): %v", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			opts = append(opts, sdkmetric.WithReader(r))
			t.metrics = otlpTarget(getenv, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
		}
	}
	t.mp = sdkmetric.NewMeterProvider(opts...)
	t.stop = append(t.stop, t.mp.Shutdown)
	return t, nil
}

// options are the tracing package's options for one tenant.
func (t *telemetry) options(tf *transportFlags, attrs ...attribute.KeyValue) []tracing.Option {
	opts := []tracing.Option{
		tracing.WithTracerProvider(t.tp),
		tracing.WithPropagators(t.prop),
		tracing.WithMessagingSystem(strings.ToLower(tf.kind)),
	}
	if t.mp != nil {
		opts = append(opts, tracing.WithMeterProvider(t.mp), tracing.WithStatsTimeout(statsTimeout))
	}
	if tf.destination != "" {
		dest := tf.destination
		opts = append(opts, tracing.WithDestination(func(e core.Event) string {
			if e.Destination != "" {
				return e.Destination
			}
			return dest
		}))
	}
	if len(attrs) > 0 {
		opts = append(opts, tracing.WithMetricAttributes(attrs...))
	}
	return opts
}

// middleware is the relay's publisher middleware: producer spans that join
// the producers' traces, when traces are exported.
func (t *telemetry) middleware(tf *transportFlags, attrs ...attribute.KeyValue) []core.PublisherMiddleware {
	if t.traces == "off" {
		return nil
	}
	return []core.PublisherMiddleware{tracing.PublisherMiddleware(t.options(tf, attrs...)...)}
}

// meter is the meter of the service's own instruments (outboxctl.*).
func (t *telemetry) meter() metric.Meter {
	return t.mp.Meter("github.com/outboxkit/outboxkit/contrib/outboxctl")
}

// shutdown flushes the exporters, bounded so an unreachable collector
// cannot hold the exit.
func (t *telemetry) shutdown(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, f := range t.stop {
		errs = append(errs, f(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		logger.Warn("telemetry not flushed at exit", "error", err)
	}
}

// statsTimeout bounds each tenant's Stats query during a scrape.
const statsTimeout = 3 * time.Second

// otelErrorHandler logs what OpenTelemetry could not do (export, collect)
// as warnings, each distinct message at most once a minute: an
// unreachable collector must not flood the log.
type otelErrorHandler struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]time.Time
}

func newOtelErrorHandler(logger *slog.Logger) *otelErrorHandler {
	return &otelErrorHandler{log: logger, last: map[string]time.Time{}}
}

func (h *otelErrorHandler) Handle(err error) {
	if err == nil {
		return
	}
	msg := err.Error()
	h.mu.Lock()
	now := time.Now()
	if t, ok := h.last[msg]; ok && now.Sub(t) < time.Minute {
		h.mu.Unlock()
		return
	}
	if len(h.last) > 1000 {
		clear(h.last)
	}
	h.last[msg] = now
	h.mu.Unlock()
	h.log.Warn("telemetry", "error", err)
}
