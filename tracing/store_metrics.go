package tracing

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outboxkit/outboxkit/core"
)

// RegisterStoreMetrics registers observable gauges read from store.Stats at
// each collection: MetricEventsPending, MetricEventsLeased,
// MetricOldestPendingAge and MetricEventsDeadLettered. Call unregister when
// the store goes away, or the meter keeps calling it.
//
// The gauges are observed, not counted, because the store is the only source
// of truth across many relay processes: counters in one process cannot know
// what another relay published or what a service in another language wrote.
// Each Stats call is bounded by WithStatsTimeout; when it fails, that
// collection reports no value for the gauges (a gap, not a false zero) and
// the error goes to the meter provider's error handling.
func RegisterStoreMetrics(store core.StatsReader, opts ...Option) (unregister func() error, err error) {
	if store == nil {
		return nil, &core.ConfigError{Field: "store", Reason: "is nil: pass the outbox store, which must implement core.StatsReader"}
	}
	c := newConfig(opts)
	m := c.meter()
	pending, err1 := m.Int64ObservableGauge(MetricEventsPending, metric.WithUnit("{event}"),
		metric.WithDescription("Events neither published nor dead-lettered, in flight included."))
	leased, err2 := m.Int64ObservableGauge(MetricEventsLeased, metric.WithUnit("{event}"),
		metric.WithDescription("Pending events under a live lease: being published now."))
	age, err3 := m.Float64ObservableGauge(MetricOldestPendingAge, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest pending event has waited; 0 when none is pending."))
	dead, err4 := m.Int64ObservableGauge(MetricEventsDeadLettered, metric.WithUnit("{event}"),
		metric.WithDescription("Dead-lettered events in the store, waiting for a replay or a purge."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("outboxkit/tracing: create store gauges: %w", err)
	}

	attrs := metric.WithAttributeSet(attribute.NewSet(c.metricAttrs...))
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, c.statsTO)
		defer cancel()
		st, err := store.Stats(ctx)
		if err != nil {
			return fmt.Errorf("outboxkit/tracing: read outbox stats: %w", err)
		}
		o.ObserveInt64(pending, st.Pending, attrs)
		o.ObserveInt64(leased, st.Leased, attrs)
		o.ObserveFloat64(age, st.OldestPendingAge.Seconds(), attrs)
		o.ObserveInt64(dead, st.DeadLettered, attrs)
		return nil
	}, pending, leased, age, dead)
	if err != nil {
		return nil, fmt.Errorf("outboxkit/tracing: register store gauges: %w", err)
	}
	return reg.Unregister, nil
}
