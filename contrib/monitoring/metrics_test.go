package monitoring

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/tracing"
)

// prometheusName is the name the OpenTelemetry Prometheus exporter's default
// translation (UnderscoreEscapingWithSuffixes) gives an instrument, for the
// units outboxkit's instruments use: dots become underscores, "s" adds
// _seconds, an annotation in braces ({event}) adds nothing, and a counter
// ends in _total.
func prometheusName(instrument, unit, typ string) string {
	name := strings.ReplaceAll(instrument, ".", "_")
	if unit == "s" {
		name += "_seconds"
	}
	if typ == "counter" {
		name += "_total"
	}
	return name
}

// TestMetricNamesFollowTheTranslation: every listed family is named after its
// tracing instrument as the exporter translates it, so a renamed instrument
// fails here rather than in a silent dashboard.
func TestMetricNamesFollowTheTranslation(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, m := range Metrics() {
		if seen[m.Name] {
			t.Errorf("%s is listed twice", m.Name)
		}
		seen[m.Name] = true
		if want := prometheusName(m.Instrument, m.Unit, m.Type); m.Name != want {
			t.Errorf("%s (%s, unit %s, %s): the exporter names it %s", m.Name, m.Instrument, m.Unit, m.Type, want)
		}
		prefix := "outboxkit." // the tracing package's
		if m.Service {
			prefix = "outboxctl." // contrib/outboxctl's own
		}
		if !strings.HasPrefix(m.Instrument, prefix) {
			t.Errorf("%s: instrument %q does not start with %q", m.Name, m.Instrument, prefix)
		}
	}
}

// stats is a core.StatsReader with fixed numbers.
type stats struct{}

func (stats) Stats(context.Context) (core.Stats, error) {
	return core.Stats{Pending: 3, Leased: 1, OldestPendingAge: 42 * time.Second, DeadLettered: 2}, nil
}

// TestMetricsAsTheExporterServesThem drives the tracing package's
// instruments (store gauges and relay hook, every outcome and both settle
// error types) through the OpenTelemetry Prometheus exporter the relay uses,
// and checks that the families it serves are exactly Metrics()' (but for
// outboxctl's own, Service), with their types and labels. The relay's own
// /metrics is checked against the list, its own families included, by
// TestPrometheusAlertsOnARealRelay.
func TestMetricsAsTheExporterServesThem(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// As outboxctl relay builds its exporter (contrib/outboxctl/telemetry.go):
	// the translation pinned, no otel_scope_* labels.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tenant := tracing.WithMetricAttributes(attribute.String("database", "app"), attribute.String("schema", "tenant_a"), attribute.String("table", "outbox_events"))
	unregister, err := tracing.RegisterStoreMetrics(stats{}, tracing.WithMeterProvider(mp), tenant)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unregister() })

	hook := tracing.RelayHook(tracing.WithMeterProvider(mp), tenant)
	ctx := context.Background()
	batch := func(kind core.OutcomeKind, err error) {
		e := core.Event{ID: core.NewID(), Type: "order.placed", Attempts: 1}
		hook.AfterSettle(ctx, core.SettleInfo{Events: []core.Event{e}, Outcomes: []core.Outcome{{ID: e.ID, Kind: kind}}, PublishDuration: 3 * time.Millisecond, Err: err})
	}
	batch(core.Published, nil)
	batch(core.Retry, nil)
	batch(core.DeadLettered, nil)
	batch(core.Published, errors.New("connection reset"))
	batch(core.Published, &core.LeaseLostError{})

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "outboxkit_") {
			continue
		}
		served[f.GetName()] = true
		m, ok := lookup(f.GetName())
		if !ok {
			t.Errorf("the exporter serves %s, which Metrics() does not list: add it (and use it where it helps)", f.GetName())
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != m.Type {
			t.Errorf("%s is a %s, listed as a %s", m.Name, got, m.Type)
		}
		want := append(TenantLabels(), m.Labels...)
		slices.Sort(want)
		for _, s := range f.GetMetric() {
			var got []string
			for _, l := range s.GetLabel() {
				got = append(got, l.GetName())
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s has labels %v, want %v", m.Name, got, want)
				break
			}
		}
	}
	for _, m := range Metrics() {
		if !served[m.Name] && !m.Service {
			t.Errorf("Metrics() lists %s, which the exporter does not serve for the tracing package's instruments", m.Name)
		}
	}
}

// lookup returns the listed family of that name.
func lookup(name string) (Metric, bool) {
	for _, m := range Metrics() {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

func TestFamilyOf(t *testing.T) {
	t.Parallel()
	for series, want := range map[string]string{
		"outboxkit_events_pending":                    "outboxkit_events_pending",
		"outboxkit_publish_duration_seconds_bucket":   "outboxkit_publish_duration_seconds",
		"outboxkit_events_attempts_count":             "outboxkit_events_attempts",
		"outboxkit_events_oldest_pending_age_seconds": "outboxkit_events_oldest_pending_age_seconds",
	} {
		if m, ok := FamilyOf(series); !ok || m.Name != want {
			t.Errorf("FamilyOf(%q) = %q, %v; want %q", series, m.Name, ok, want)
		}
	}
	for _, series := range []string{"outboxkit_events_pending_bucket", "outboxkit_events_pending_total", "up", "outboxkit_events_settled"} {
		if m, ok := FamilyOf(series); ok {
			t.Errorf("FamilyOf(%q) = %q, want none", series, m.Name)
		}
	}
}
