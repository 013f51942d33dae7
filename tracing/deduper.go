package tracing

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/core"
)

// Deduper wraps d so that every deduplication decision shows up in
// telemetry. After d.Once returns, the span in ctx (the consumer span of
// HandlerMiddleware) gets DedupeAppliedKey, true or false, and ConsumerKey;
// a suppressed duplicate also adds a DuplicateEventName span event and counts
// one on MetricEventsDuplicates. A failed effect records nothing here: the
// handler's error is on the span already.
//
// Wrapping the Deduper rather than the handler is what makes this work with
// core.Idempotent and core.ApplyOnce unchanged: both call Once, and only
// Once knows whether the effect ran. It panics if d is nil, a programming
// error like registering a nil handler.
//
// When d is a core.SequencedDeduper (postgres.Sequencer), so is the
// wrapper, and ApplyOnce still orders sequenced events through it. Its
// OnceInOrder also sets SequenceOutcomeKey on the span: "applied",
// "stale" (with a StaleEventName span event, counted on MetricEventsStale),
// "gap" or "parked" (with a SequenceGapEventName span event, counted on
// MetricSequenceGaps by SequenceOutcomeKey).
func Deduper(d core.Deduper, opts ...Option) core.Deduper {
	if d == nil {
		panic("outboxkit/tracing: Deduper needs a core.Deduper to wrap")
	}
	c := newConfig(opts)
	dups := int64Counter(c.meter(), MetricEventsDuplicates, "{event}",
		"Duplicate deliveries whose effect was skipped because it had been applied already.")
	w := &deduper{next: d, cfg: c, dups: dups}
	sd, ok := d.(core.SequencedDeduper)
	if !ok {
		return w
	}
	return &sequencedDeduper{
		deduper: w, seq: sd,
		stale: int64Counter(c.meter(), MetricEventsStale, "{event}",
			"Sequenced deliveries acknowledged without effect because their aggregate's order had passed them."),
		gaps: int64Counter(c.meter(), MetricSequenceGaps, "{event}",
			"Sequenced deliveries refused because a predecessor had not been applied yet."),
	}
}

// Telemetry of sequenced deliveries (see Deduper).
const (
	// SequenceOutcomeKey is the sequencer's decision on the consumer span
	// and on MetricSequenceGaps: "applied", "stale", "gap" or "parked".
	SequenceOutcomeKey = attribute.Key("outboxkit.sequence.outcome")
	// StaleEventName is the span event for a stale sequenced delivery.
	StaleEventName = "stale"
	// SequenceGapEventName is the span event for a delivery that arrived
	// before its predecessor.
	SequenceGapEventName = "sequence_gap"
	// MetricEventsStale (counter, {event}) counts stale sequenced
	// deliveries acknowledged without effect, by ConsumerKey.
	MetricEventsStale = "outboxkit.events.stale"
	// MetricSequenceGaps (counter, {event}) counts deliveries refused for a
	// missing predecessor, by ConsumerKey and SequenceOutcomeKey ("gap":
	// to be redelivered; "parked": given up on). A rate that does not fall
	// back to zero means an event is lost upstream.
	MetricSequenceGaps = "outboxkit.sequence.gaps"
)

type deduper struct {
	next core.Deduper
	cfg  *config
	dups metric.Int64Counter
}

type sequencedDeduper struct {
	*deduper
	seq         core.SequencedDeduper
	stale, gaps metric.Int64Counter
}

func (d *sequencedDeduper) OnceInOrder(ctx context.Context, consumer string, e core.Event, effect func(ctx context.Context) error) (bool, error) {
	applied, err := d.seq.OnceInOrder(ctx, consumer, e, effect)
	var gap *core.SequenceGapError
	if err != nil && !errors.As(err, &gap) {
		return applied, err // the effect's error is on the span already
	}
	span := trace.SpanFromContext(ctx)
	c := ConsumerKey.String(consumer)
	attrs := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue{semconv.MessagingSystemKey.String(d.cfg.system), c}, kv...), d.cfg.metricAttrs...)...))
	}
	switch {
	case gap != nil:
		outcome := "gap"
		if gap.Parked {
			outcome = "parked"
		}
		span.SetAttributes(SequenceOutcomeKey.String(outcome), c)
		span.AddEvent(SequenceGapEventName, trace.WithAttributes(c, semconv.MessagingMessageID(e.ID.String()),
			attribute.Int64("outboxkit.sequence.expected", gap.Expected), attribute.Int64("outboxkit.sequence.got", gap.Got)))
		d.gaps.Add(ctx, 1, attrs(SequenceOutcomeKey.String(outcome)))
	case applied:
		span.SetAttributes(DedupeAppliedKey.Bool(true), SequenceOutcomeKey.String("applied"), c)
	default:
		span.SetAttributes(DedupeAppliedKey.Bool(false), SequenceOutcomeKey.String("stale"), c)
		span.AddEvent(StaleEventName, trace.WithAttributes(c, semconv.MessagingMessageID(e.ID.String()), attribute.Int64("outboxkit.sequence.got", e.Sequence)))
		d.stale.Add(ctx, 1, attrs())
	}
	return applied, err
}

func (d *deduper) Once(ctx context.Context, key core.DedupeKey, effect func(ctx context.Context) error) (bool, error) {
	applied, err := d.next.Once(ctx, key, effect)
	if err != nil {
		return applied, err
	}
	consumer := ConsumerKey.String(key.Consumer)
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(DedupeAppliedKey.Bool(applied), consumer)
	if !applied {
		span.AddEvent(DuplicateEventName, trace.WithAttributes(consumer, semconv.MessagingMessageID(key.EventID.String())))
		attrs := append([]attribute.KeyValue{semconv.MessagingSystemKey.String(d.cfg.system), consumer}, d.cfg.metricAttrs...)
		d.dups.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	}
	return applied, nil
}

// Unwrap returns the wrapped Deduper, so code looking for a store's optional
// capabilities can see through the wrapper.
func (d *deduper) Unwrap() core.Deduper { return d.next }
