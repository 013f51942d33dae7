package tracing

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
)

// ScopeName is the instrumentation scope of every tracer and meter this
// package creates, so backends can tell outboxkit's telemetry apart.
const ScopeName = "github.com/outboxkit/outboxkit/tracing"

// DefaultMessagingSystem is the messaging.system attribute used until
// WithMessagingSystem names the transport. The semantic conventions require
// the attribute, and "outboxkit" at least says where the span came from.
const DefaultMessagingSystem = "outboxkit"

// DefaultStatsTimeout bounds one Stats call made while metrics are collected;
// see WithStatsTimeout.
const DefaultStatsTimeout = 5 * time.Second

// Option configures the constructors of this package. Every constructor
// accepts every Option and ignores those that do not concern it (a
// MeterProvider means nothing to Inject), so one option list can be shared by
// the write side, the relay and the consumer.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is resolved once per constructor, not per event: the global
// providers and propagator are delegating proxies, so reading them at
// construction still follows a later otel.SetTracerProvider.
type config struct {
	tp          trace.TracerProvider
	mp          metric.MeterProvider
	prop        propagation.TextMapPropagator
	system      string
	destination func(core.Event) string
	metricAttrs []attribute.KeyValue
	statsTO     time.Duration
}

func newConfig(opts []Option) *config {
	c := &config{system: DefaultMessagingSystem, statsTO: DefaultStatsTimeout}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	if c.destination == nil {
		c.destination = func(e core.Event) string { return e.Destination }
	}
	return c
}

func (c *config) tracer() trace.Tracer {
	return c.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
}

func (c *config) meter() metric.Meter {
	return c.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
}

// WithTracerProvider sets the provider spans are created from. Defaults to
// otel.GetTracerProvider(); nil keeps the default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the provider metrics are recorded with. Defaults to
// otel.GetMeterProvider(); nil keeps the default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithPropagators sets how trace context is written into and read from event
// headers. Defaults to otel.GetTextMapPropagator(); nil keeps the default.
//
// The writing and reading sides must agree: use the same propagators (W3C
// trace context and baggage, typically) for Inject, PublisherMiddleware and
// HandlerMiddleware.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.prop = p })
}

// WithMessagingSystem sets the messaging.system attribute of spans and
// metrics to the transport's name, e.g. "qstash", "nats", "rabbitmq" or
// "kafka" (the semantic conventions' well-known values where one applies).
// Defaults to DefaultMessagingSystem.
func WithMessagingSystem(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.system = name
		}
	})
}

// WithDestination sets how an event's messaging.destination.name (and the
// destination part of span names) is found: the transport's default URL or
// topic is not visible on the event, so a relay publishing to one topic
// should say which. Return "" when unknown. Defaults to the event's
// Destination field.
func WithDestination(f func(e core.Event) string) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.destination = f
		}
	})
}

// WithMetricAttributes adds attributes to every metric recorded (the
// store's gauges, the relay's counters, the duplicates counter): a schema or
// tenant name when one process runs several outboxes, say. Keep them low in
// cardinality.
func WithMetricAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.metricAttrs = append(c.metricAttrs, attrs...) })
}

// WithStatsTimeout bounds each Stats call RegisterStoreMetrics makes during
// a collection, so a slow or unreachable database delays one scrape by at
// most this long instead of stalling the metrics pipeline. Defaults to
// DefaultStatsTimeout; zero or less keeps the default.
func WithStatsTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.statsTO = d
		}
	})
}
