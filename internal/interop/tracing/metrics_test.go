package tracing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/interop/interoptest"
	"github.com/outboxkit/outboxkit/tracing"
)

// collect reads every metric the provider holds, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func metricNamed(t *testing.T, ms map[string]metricdata.Metrics, name, unit string) metricdata.Metrics {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("metric %s not recorded", name)
	}
	if m.Unit != unit {
		t.Errorf("metric %s has unit %q, want %q", name, m.Unit, unit)
	}
	return m
}

// point returns the one data point of m whose attributes include want,
// failing unless there is exactly one.
func point[N int64 | float64](t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) N {
	t.Helper()
	var found []N
	match := func(set attribute.Set) bool {
		for _, kv := range want {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[N]:
		for _, p := range d.DataPoints {
			if match(p.Attributes) {
				found = append(found, p.Value)
			}
		}
	case metricdata.Gauge[N]:
		for _, p := range d.DataPoints {
			if match(p.Attributes) {
				found = append(found, p.Value)
			}
		}
	default:
		t.Fatalf("metric %s is a %T", m.Name, m.Data)
	}
	if len(found) != 1 {
		t.Fatalf("metric %s: %d points match %v, want 1: %+v", m.Name, len(found), want, m.Data)
	}
	return found[0]
}

func histogram[N int64 | float64](t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) metricdata.HistogramDataPoint[N] {
	t.Helper()
	d, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("metric %s is a %T", m.Name, m.Data)
	}
	var found []metricdata.HistogramDataPoint[N]
points:
	for _, p := range d.DataPoints {
		for _, kv := range want {
			if v, ok := p.Attributes.Value(kv.Key); !ok || v != kv.Value {
				continue points
			}
		}
		found = append(found, p)
	}
	if len(found) != 1 {
		t.Fatalf("histogram %s: %d points match %v, want 1", m.Name, len(found), want)
	}
	return found[0]
}

// TestMetricsAfterAKnownScenario runs a relay on a fake clock over three
// events (one published, one failing for now, one refused for good), then
// writes nine more, delivers the published one twice through the deduper,
// and checks every metric's exact value.
func TestMetricsAfterAKnownScenario(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	outbox := attribute.String("outbox", "orders")
	opts := []tracing.Option{
		tracing.WithMeterProvider(mp),
		tracing.WithMessagingSystem("qstash"),
		tracing.WithMetricAttributes(outbox),
	}
	system := attribute.String("messaging.system", "qstash")

	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := coretest.NewFakeClock(t0)
	store := memory.NewStore(&memory.StoreConfig{Clock: clock})
	unregister, err := tracing.RegisterStoreMetrics(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unregister(); err != nil {
			t.Error(err)
		}
	}()

	ok, flaky, refused := interoptest.MustEvent(t, "ok"), interoptest.MustEvent(t, "flaky"), interoptest.MustEvent(t, "refused")
	if err := store.Add(ctx, ok, flaky, refused); err != nil {
		t.Fatal(err)
	}
	transport := core.PublisherFunc(func(_ context.Context, evs []core.Event) error {
		clock.Advance(250 * time.Millisecond) // the publish takes exactly this long
		be := core.NewBatchError(len(evs))
		for i, e := range evs {
			switch e.Type {
			case "flaky":
				be.Set(i, errors.New("503"))
			case "refused":
				be.Set(i, core.Permanent(errors.New("400")))
			}
		}
		return be.ErrOrNil()
	})
	relay, err := core.NewRelay(store, transport, &core.RelayConfig{
		Clock: clock,
		Hooks: []core.RelayHook{tracing.RelayHook(opts...)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Drain(ctx); err != nil || n != 3 {
		t.Fatalf("Drain = %d, %v; want 3", n, err)
	}

	// Nine more events, written later; the flaky one (written at t0) stays
	// the oldest pending.
	clock.Advance(30 * time.Second)
	for range 9 {
		if err := store.Add(ctx, interoptest.MustEvent(t, "later")); err != nil {
			t.Fatal(err)
		}
	}
	clock.Set(t0.Add(90 * time.Second))

	// The published event delivered twice: applied once, one duplicate.
	applied := 0
	consumer := core.ChainHandler(core.HandlerFunc(func(context.Context, core.Event) error { applied++; return nil }),
		core.Idempotent(tracing.Deduper(memory.NewDeduper(), opts...), "billing"))
	for range 2 {
		if err := consumer.Handle(ctx, ok); err != nil {
			t.Fatal(err)
		}
	}
	if applied != 1 {
		t.Fatalf("applied %d times, want 1", applied)
	}

	ms := collect(t, reader)

	// Store gauges.
	if got := point[int64](t, metricNamed(t, ms, tracing.MetricEventsPending, "{event}"), outbox); got != 10 {
		t.Errorf("pending = %d, want 10", got)
	}
	if got := point[int64](t, metricNamed(t, ms, tracing.MetricEventsLeased, "{event}"), outbox); got != 0 {
		t.Errorf("leased = %d, want 0", got)
	}
	if got := point[float64](t, metricNamed(t, ms, tracing.MetricOldestPendingAge, "s"), outbox); got != 90 {
		t.Errorf("oldest pending age = %vs, want 90s", got)
	}
	if got := point[int64](t, metricNamed(t, ms, tracing.MetricEventsDeadLettered, "{event}"), outbox); got != 1 {
		t.Errorf("dead-lettered = %d, want 1", got)
	}

	// Relay counters, one point per outcome and event type.
	settled := metricNamed(t, ms, tracing.MetricEventsSettled, "{event}")
	for _, tc := range []struct{ outcome, typ string }{{"published", "ok"}, {"retry", "flaky"}, {"dead_lettered", "refused"}} {
		got := point[int64](t, settled, system, outbox, attribute.String("outboxkit.outcome", tc.outcome),
			attribute.String("cloudevents.event_type", tc.typ))
		if got != 1 {
			t.Errorf("settled{outcome=%s} = %d, want 1", tc.outcome, got)
		}
	}
	if d := settled.Data.(metricdata.Sum[int64]); !d.IsMonotonic || len(d.DataPoints) != 3 {
		t.Errorf("settled: monotonic %v with %d points, want a counter with 3", d.IsMonotonic, len(d.DataPoints))
	}

	attempts := metricNamed(t, ms, tracing.MetricEventAttempts, "{attempt}")
	for _, outcome := range []string{"published", "dead_lettered"} {
		p := histogram[int64](t, attempts, system, outbox, attribute.String("outboxkit.outcome", outcome))
		if p.Count != 1 || p.Sum != 1 {
			t.Errorf("attempts{outcome=%s}: count %d sum %d, want 1 event that took 1 attempt", outcome, p.Count, p.Sum)
		}
	}

	dur := histogram[float64](t, metricNamed(t, ms, tracing.MetricPublishDuration, "s"), system, outbox,
		attribute.String("outboxkit.publish.result", "partial"))
	if dur.Count != 1 || dur.Sum != 0.25 {
		t.Errorf("publish duration: count %d sum %vs, want one publish of 0.25s", dur.Count, dur.Sum)
	}

	if got := point[int64](t, metricNamed(t, ms, tracing.MetricEventsDuplicates, "{event}"), system, outbox,
		attribute.String("outboxkit.consumer", "billing")); got != 1 {
		t.Errorf("duplicates = %d, want 1", got)
	}
	if _, found := ms[tracing.MetricSettleErrors]; found {
		t.Errorf("settle errors recorded in a scenario without any")
	}
	if _, found := ms[tracing.MetricEventsUnsettled]; found {
		t.Errorf("unsettled events recorded in a scenario without settle errors")
	}
}

func TestRelayHookCountsSettleErrors(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	h := tracing.RelayHook(tracing.WithMeterProvider(mp))
	e := interoptest.MustEvent(t, "a")
	info := core.SettleInfo{Events: []core.Event{e}, Outcomes: []core.Outcome{{ID: e.ID, Kind: core.Published}}}
	info.Err = &core.LeaseLostError{IDs: []core.ID{e.ID}}
	h.AfterSettle(context.Background(), info)
	info.Err = errors.New("connection reset")
	h.AfterSettle(context.Background(), info)

	m := metricNamed(t, collect(t, reader), tracing.MetricSettleErrors, "{batch}")
	for _, kind := range []string{"lease_lost", "store"} {
		if got := point[int64](t, m, attribute.String("error.type", kind)); got != 1 {
			t.Errorf("settle errors{error.type=%s} = %d, want 1", kind, got)
		}
	}
}

// statsFunc adapts a function to core.StatsReader.
type statsFunc func(ctx context.Context) (core.Stats, error)

func (f statsFunc) Stats(ctx context.Context) (core.Stats, error) { return f(ctx) }

func TestStoreMetricsBoundedAndUnregistered(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	// A store that hangs until its context gives up, as an unreachable
	// database does.
	calls := 0
	hanging := statsFunc(func(ctx context.Context) (core.Stats, error) {
		calls++
		<-ctx.Done()
		return core.Stats{}, ctx.Err()
	})
	unregister, err := tracing.RegisterStoreMetrics(hanging, tracing.WithMeterProvider(mp), tracing.WithStatsTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	start := time.Now()
	err = reader.Collect(context.Background(), &rm)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("collect with a hanging store = %v, want a deadline error", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("collect took %v despite a 20ms stats timeout", elapsed)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			t.Errorf("failed stats still reported %s = %+v", m.Name, m.Data)
		}
	}
	if calls != 1 {
		t.Fatalf("Stats called %d times, want 1", calls)
	}

	if err := unregister(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("Stats called after unregister")
	}
}

func TestRegisterStoreMetricsNeedsAStore(t *testing.T) {
	t.Parallel()
	if _, err := tracing.RegisterStoreMetrics(nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("RegisterStoreMetrics(nil) = %v, want ErrInvalidConfig", err)
	}
}

// TestRelayHookCountsOnlySettledEvents: a batch whose settle failed is
// published and settled again later, so counting its events as settled (and
// their attempts as final) would count them twice. Only the events a settle
// recorded count; the others are counted as unsettled.
func TestRelayHookCountsOnlySettledEvents(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	h := tracing.RelayHook(tracing.WithMeterProvider(mp))
	batch := func(kinds ...core.OutcomeKind) core.SettleInfo {
		var info core.SettleInfo
		for _, k := range kinds {
			e := interoptest.MustEvent(t, "a")
			e.Attempts = 1
			info.Events = append(info.Events, e)
			info.Outcomes = append(info.Outcomes, core.Outcome{ID: e.ID, Kind: k})
		}
		return info
	}

	// The store failed: nothing was recorded.
	failed := batch(core.Published, core.Published, core.DeadLettered)
	failed.Err = errors.New("connection reset")
	h.AfterSettle(context.Background(), failed)
	// Another relay took one event over: the other two were recorded.
	lost := batch(core.Published, core.Published, core.Published)
	lost.Err = &core.LeaseLostError{IDs: []core.ID{lost.Outcomes[1].ID}}
	h.AfterSettle(context.Background(), lost)

	ms := collect(t, reader)
	settled := metricNamed(t, ms, tracing.MetricEventsSettled, "{event}")
	if got := point[int64](t, settled, attribute.String("outboxkit.outcome", "published")); got != 2 {
		t.Errorf("settled{outcome=published} = %d, want 2 (the lease-lost batch's other events)", got)
	}
	if d := settled.Data.(metricdata.Sum[int64]); len(d.DataPoints) != 1 {
		t.Errorf("settled has %d points, want only published: %+v", len(d.DataPoints), d.DataPoints)
	}
	attempts := metricNamed(t, ms, tracing.MetricEventAttempts, "{attempt}")
	if d := attempts.Data.(metricdata.Histogram[int64]); len(d.DataPoints) != 1 || d.DataPoints[0].Count != 2 {
		t.Errorf("attempts recorded for %+v, want the 2 settled events only", d.DataPoints)
	}
	unsettled := metricNamed(t, ms, tracing.MetricEventsUnsettled, "{event}")
	for _, tc := range []struct {
		outcome, kind string
		want          int64
	}{{"published", "store", 2}, {"dead_lettered", "store", 1}, {"published", "lease_lost", 1}} {
		if got := point[int64](t, unsettled, attribute.String("outboxkit.outcome", tc.outcome), attribute.String("error.type", tc.kind)); got != tc.want {
			t.Errorf("unsettled{outcome=%s, error.type=%s} = %d, want %d", tc.outcome, tc.kind, got, tc.want)
		}
	}
	if d := unsettled.Data.(metricdata.Sum[int64]); !d.IsMonotonic || len(d.DataPoints) != 3 {
		t.Errorf("unsettled: monotonic %v with %d points, want a counter with 3", d.IsMonotonic, len(d.DataPoints))
	}
}
