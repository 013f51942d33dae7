package monitoring

import "github.com/outboxkit/outboxkit/tracing"

// Metric is one Prometheus metric family that `outboxctl relay` serves on
// /metrics (the tracing package's instruments and the service's own,
// through the OpenTelemetry Prometheus exporter), under the name the
// exporter gives it.
type Metric struct {
	// Name is the family's Prometheus name: the instrument's name with dots
	// turned into underscores, the unit's suffix ("s" becomes _seconds;
	// annotations such as {event} add none) and _total for counters.
	Name string
	// Type is "gauge", "counter" or "histogram".
	Type string
	// Instrument is the OpenTelemetry instrument's name (tracing.Metric*).
	Instrument string
	// Unit is the instrument's UCUM unit.
	Unit string
	// Labels are the family's own labels, beside the tenant's (TenantLabels);
	// attribute keys are spelled as the exporter spells them (dots become
	// underscores).
	Labels []string
	// Service marks the instruments of `outboxctl relay` itself
	// (outboxctl.*), which other programs running the tracing package's
	// instruments do not have.
	Service bool
	// NoTenant marks a family without the tenant's labels: per process,
	// per database or per transport.
	NoTenant bool
}

// TenantLabels are the labels every family carries in `outboxctl relay`,
// unless it is NoTenant: which outbox table of which database the numbers
// are about. Rules and panels aggregate by them.
func TenantLabels() []string { return []string{"database", "schema", "table"} }

// Metrics returns every family the rules and the dashboard may use, in a new
// slice each call.
func Metrics() []Metric {
	return []Metric{
		// Store gauges (tracing.RegisterStoreMetrics), read from the table at
		// each scrape: every relay of a table reports the same values.
		{Name: "outboxkit_events_pending", Type: "gauge", Instrument: tracing.MetricEventsPending, Unit: "{event}"},
		{Name: "outboxkit_events_leased", Type: "gauge", Instrument: tracing.MetricEventsLeased, Unit: "{event}"},
		{Name: "outboxkit_events_oldest_pending_age_seconds", Type: "gauge", Instrument: tracing.MetricOldestPendingAge, Unit: "s"},
		{Name: "outboxkit_events_dead_lettered", Type: "gauge", Instrument: tracing.MetricEventsDeadLettered, Unit: "{event}"},
		// Relay instruments (tracing.RelayHook), counted by each relay
		// process for its own batches.
		{Name: "outboxkit_events_settled_total", Type: "counter", Instrument: tracing.MetricEventsSettled, Unit: "{event}",
			Labels: []string{"outboxkit_outcome", "cloudevents_event_type", "messaging_system"}},
		{Name: "outboxkit_events_unsettled_total", Type: "counter", Instrument: tracing.MetricEventsUnsettled, Unit: "{event}",
			Labels: []string{"outboxkit_outcome", "error_type", "messaging_system"}},
		{Name: "outboxkit_events_attempts", Type: "histogram", Instrument: tracing.MetricEventAttempts, Unit: "{attempt}",
			Labels: []string{"outboxkit_outcome", "messaging_system"}},
		{Name: "outboxkit_publish_duration_seconds", Type: "histogram", Instrument: tracing.MetricPublishDuration, Unit: "s",
			Labels: []string{"outboxkit_publish_result", "messaging_system"}},
		{Name: "outboxkit_settle_errors_total", Type: "counter", Instrument: tracing.MetricSettleErrors, Unit: "{batch}",
			Labels: []string{"error_type", "messaging_system"}},

		// The service's own instruments (contrib/outboxctl, package main,
		// so their names are not constants to import). Readiness, as
		// /readyz reports it.
		{Name: "outboxctl_tenant_ready", Type: "gauge", Instrument: "outboxctl.tenant.ready", Service: true},
		{Name: "outboxctl_tenant_failures_total", Type: "counter", Instrument: "outboxctl.tenant.failures", Unit: "{failure}", Service: true},
		// Retention (postgres.Retention in each tenant's relay): every
		// relay reports whether it leads; only the leader reports the
		// backlog.
		{Name: "outboxctl_retention_leader", Type: "gauge", Instrument: "outboxctl.retention.leader", Service: true},
		{Name: "outboxctl_retention_deleted_total", Type: "counter", Instrument: "outboxctl.retention.deleted", Unit: "{row}", Service: true,
			Labels: []string{"kind"}},
		{Name: "outboxctl_retention_backlog_seconds", Type: "gauge", Instrument: "outboxctl.retention.backlog", Unit: "s", Service: true,
			Labels: []string{"kind"}},
		{Name: "outboxctl_retention_last_pass_timestamp_seconds", Type: "gauge", Instrument: "outboxctl.retention.last_pass.timestamp", Unit: "s", Service: true},
		{Name: "outboxctl_retention_passes_total", Type: "counter", Instrument: "outboxctl.retention.passes", Unit: "{pass}", Service: true,
			Labels: []string{"result"}},
		// The partitioned layout only (docs/SCHEMA.md): what the leader's
		// partition maintenance did, and how far ahead partitions exist
		// (every relay of the table reports it, read from the catalog).
		{Name: "outboxctl_retention_partitions_created_total", Type: "counter", Instrument: "outboxctl.retention.partitions.created", Unit: "{partition}", Service: true},
		{Name: "outboxctl_retention_partitions_dropped_total", Type: "counter", Instrument: "outboxctl.retention.partitions.dropped", Unit: "{partition}", Service: true},
		{Name: "outboxctl_retention_dead_letters_moved_total", Type: "counter", Instrument: "outboxctl.retention.dead_letters_moved", Unit: "{event}", Service: true},
		{Name: "outboxctl_retention_vacuums_total", Type: "counter", Instrument: "outboxctl.retention.vacuums", Unit: "{vacuum}", Service: true},
		{Name: "outboxctl_retention_vacuum_time_seconds_total", Type: "counter", Instrument: "outboxctl.retention.vacuum.time", Unit: "s", Service: true},
		{Name: "outboxctl_partitions_ahead_seconds", Type: "gauge", Instrument: "outboxctl.partitions.ahead", Unit: "s", Service: true},
		// Per process and dependency rather than per tenant: they carry
		// no (or not all of the) tenant labels.
		{Name: "outboxctl_ready", Type: "gauge", Instrument: "outboxctl.ready", Service: true, NoTenant: true},
		{Name: "outboxctl_database_up", Type: "gauge", Instrument: "outboxctl.database.up", Service: true, NoTenant: true,
			Labels: []string{"database"}},
		{Name: "outboxctl_transport_up", Type: "gauge", Instrument: "outboxctl.transport.up", Service: true, NoTenant: true,
			Labels: []string{"transport"}},
	}
}

// SeriesNames returns the sample names the family exposes: the name itself,
// or for a histogram its _bucket, _sum and _count series.
func (m Metric) SeriesNames() []string {
	if m.Type == "histogram" {
		return []string{m.Name + "_bucket", m.Name + "_sum", m.Name + "_count"}
	}
	return []string{m.Name}
}

// FamilyOf returns the family a sample name belongs to: the family itself,
// or the histogram whose _bucket, _sum or _count series it is.
func FamilyOf(series string) (Metric, bool) {
	for _, m := range Metrics() {
		for _, s := range m.SeriesNames() {
			if s == series {
				return m, true
			}
		}
	}
	return Metric{}, false
}
