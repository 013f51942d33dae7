// Package monitoring holds what operators need to watch `outboxctl relay`
// (and any program that exports the tracing package's instruments through
// the OpenTelemetry Prometheus exporter): Prometheus alert rules
// (prometheus/alerts.yml) with their promtool unit tests
// (prometheus/alerts_test.yml), a Grafana dashboard (grafana/outboxkit.json)
// and Kubernetes manifests for the relay (kubernetes/).
//
// The Go code is the list of metric names those files may use (Metrics) and
// the tests that keep the files honest: the names are the tracing package's
// instruments as the exporter spells them, checked against the exporter
// itself and against what a real `outboxctl relay` serves on /metrics; the
// rules pass `promtool test rules`; and a real Prometheus scraping a real
// relay fires OutboxOldestPendingTooOld when the transport stops answering
// and clears it when it answers again.
package monitoring
