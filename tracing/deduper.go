package tracing

import (
	"context"

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
func Deduper(d core.Deduper, opts ...Option) core.Deduper {
	if d == nil {
		panic("outboxkit/tracing: Deduper needs a core.Deduper to wrap")
	}
	c := newConfig(opts)
	dups := int64Counter(c.meter(), MetricEventsDuplicates, "{event}",
		"Duplicate deliveries whose effect was skipped because it had been applied already.")
	return &deduper{next: d, cfg: c, dups: dups}
}

type deduper struct {
	next core.Deduper
	cfg  *config
	dups metric.Int64Counter
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
