package tracing

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outboxkit/outboxkit/core"
)

// RelayHook returns a core.RelayHook (core.RelayConfig.Hooks) that records
// what the relay decided for each batch: MetricEventsSettled per event by
// outcome and event type, MetricEventAttempts for events leaving the outbox,
// MetricPublishDuration per Publish call, and, when a settle failed,
// MetricSettleErrors per batch and MetricEventsUnsettled per event.
//
// Counting happens after Settle, from the relay's own decisions, rather than
// in publisher middleware: only the relay knows whether a failure became a
// retry or a dead letter. An event counts as settled only if the store
// recorded its outcome: one whose settle failed is published and settled
// again later (or by the relay that took its lease over), and would
// otherwise be counted twice.
func RelayHook(opts ...Option) core.RelayHook {
	c := newConfig(opts)
	m := c.meter()
	return &relayHook{
		cfg: c,
		settled: int64Counter(m, MetricEventsSettled, "{event}",
			"Events the relay settled, by outcome: published, retry (publish failed, retry scheduled), dead_lettered, released."),
		attempts: int64Histogram(m, MetricEventAttempts, "{attempt}",
			"Attempts an event took when it left the outbox, published or dead-lettered.",
			1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50),
		duration: float64Histogram(m, MetricPublishDuration, "s",
			"Duration of one Publish call, which delivers one batch.",
			0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30),
		settleErrs: int64Counter(m, MetricSettleErrors, "{batch}",
			"Batches whose settle failed; their events are published again once the lease expires."),
		unsettled: int64Counter(m, MetricEventsUnsettled, "{event}",
			"Events whose outcome the relay decided but the store did not record, by outcome and error.type: lease_lost or store."),
	}
}

type relayHook struct {
	cfg        *config
	settled    metric.Int64Counter
	attempts   metric.Int64Histogram
	duration   metric.Float64Histogram
	settleErrs metric.Int64Counter
	unsettled  metric.Int64Counter
}

type settledKey struct {
	outcome   string
	eventType string
}

// settleFailure returns what info.Err says about the batch's settle: whether
// it failed, its error.type, and which events it did not record (nil with
// failed set: none was recorded).
func settleFailure(err error) (failed bool, kind string, lost map[core.ID]bool) {
	if err == nil {
		return false, "", nil
	}
	if !errors.Is(err, core.ErrLeaseLost) {
		// The store call failed as a whole (see core.SettleClaimer).
		return true, "store", nil
	}
	var lle *core.LeaseLostError
	if !errors.As(err, &lle) {
		// Lease lost, but for which events is not said: assume all.
		return true, "lease_lost", nil
	}
	lost = make(map[core.ID]bool, len(lle.IDs))
	for _, id := range lle.IDs {
		lost[id] = true
	}
	return true, "lease_lost", lost
}

func (h *relayHook) AfterSettle(ctx context.Context, info core.SettleInfo) {
	// Group per (outcome, type) so a batch of a hundred events costs a few
	// Adds, not a hundred attribute sets.
	counts := make(map[settledKey]int64, 4)
	var unsettled map[string]int64
	failed, kind, lost := settleFailure(info.Err)
	published := 0
	for i, o := range info.Outcomes {
		outcome := outcomeName(o.Kind)
		if o.Kind == core.Published {
			published++ // by the transport, whatever the settle did
		}
		if failed && (lost == nil || lost[o.ID]) {
			if unsettled == nil {
				unsettled = make(map[string]int64, 4)
			}
			unsettled[outcome]++
			continue
		}
		var e core.Event
		if i < len(info.Events) {
			e = info.Events[i]
		}
		counts[settledKey{outcome, e.Type}]++
		if o.Kind == core.Published || o.Kind == core.DeadLettered {
			h.attempts.Record(ctx, int64(e.Attempts), h.with(OutcomeKey.String(outcome)))
		}
	}
	for k, n := range counts {
		h.settled.Add(ctx, n, h.with(OutcomeKey.String(k.outcome), semconv.CloudEventsEventType(k.eventType)))
	}
	for outcome, n := range unsettled {
		h.unsettled.Add(ctx, n, h.with(OutcomeKey.String(outcome), semconv.ErrorTypeKey.String(kind)))
	}

	result := "partial"
	switch published {
	case len(info.Outcomes):
		result = "ok"
	case 0:
		result = "failed"
	}
	h.duration.Record(ctx, info.PublishDuration.Seconds(), h.with(PublishResultKey.String(result)))

	if failed {
		h.settleErrs.Add(ctx, 1, h.with(semconv.ErrorTypeKey.String(kind)))
	}
}

// with returns the attributes every relay metric carries plus extra.
func (h *relayHook) with(extra ...attribute.KeyValue) metric.MeasurementOption {
	attrs := make([]attribute.KeyValue, 0, 1+len(extra)+len(h.cfg.metricAttrs))
	attrs = append(attrs, semconv.MessagingSystemKey.String(h.cfg.system))
	attrs = append(attrs, extra...)
	attrs = append(attrs, h.cfg.metricAttrs...)
	return metric.WithAttributeSet(attribute.NewSet(attrs...))
}

// outcomeName spells outcomes the way attribute values usually are
// (snake_case), unlike OutcomeKind.String's "dead-lettered".
func outcomeName(k core.OutcomeKind) string {
	switch k {
	case core.Published:
		return "published"
	case core.Retry:
		return "retry"
	case core.DeadLettered:
		return "dead_lettered"
	case core.Released:
		return "released"
	case core.Deferred:
		return "deferred"
	default:
		return "unknown"
	}
}

// The instrument constructors below never fail the caller: a metric that
// cannot be created (a provider rejecting a name, say) must not stop a relay
// or a consumer. The error goes to the OpenTelemetry error handler, as
// OpenTelemetry's own instrumentation does, and a no-op instrument stands in.

func int64Counter(m metric.Meter, name, unit, desc string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil || c == nil {
		otel.Handle(err)
		return noop.Int64Counter{}
	}
	return c
}

func int64Histogram(m metric.Meter, name, unit, desc string, bounds ...float64) metric.Int64Histogram {
	h, err := m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
	if err != nil || h == nil {
		otel.Handle(err)
		return noop.Int64Histogram{}
	}
	return h
}

func float64Histogram(m metric.Meter, name, unit, desc string, bounds ...float64) metric.Float64Histogram {
	h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
	if err != nil || h == nil {
		otel.Handle(err)
		return noop.Float64Histogram{}
	}
	return h
}
