package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxkit/outboxkit/core"
)

// otlpReceiver is an OTLP/HTTP collector that keeps what it is sent.
type otlpReceiver struct {
	url string

	mu      sync.Mutex
	spans   []*tracepb.ResourceSpans
	metrics []string // metric names
	posts   int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.posts++
		switch req.URL.Path {
		case "/v1/traces":
			var m colltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(b, &m); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.spans = append(r.spans, m.ResourceSpans...)
			out, _ := proto.Marshal(&colltrace.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
		case "/v1/metrics":
			var m collmetrics.ExportMetricsServiceRequest
			if err := proto.Unmarshal(b, &m); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rm := range m.ResourceMetrics {
				for _, sm := range rm.ScopeMetrics {
					for _, mt := range sm.Metrics {
						r.metrics = append(r.metrics, mt.Name)
					}
				}
			}
			out, _ := proto.Marshal(&collmetrics.ExportMetricsServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// producerSpan finds a span of the trace traceID whose parent is parentID,
// and the service.name of its resource.
func (r *otlpReceiver) producerSpan(traceID, parentID []byte) (*tracepb.Span, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.spans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if bytes.Equal(s.TraceId, traceID) && bytes.Equal(s.ParentSpanId, parentID) {
					return s, service
				}
			}
		}
	}
	return nil, ""
}

func (r *otlpReceiver) hasMetric(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.metrics {
		if m == name {
			return true
		}
	}
	return false
}

// TestRelayServiceOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set, the relay's
// producer span for an event joins the trace its producer wrote into the
// event's headers (parent: the producer's span), under OTEL_SERVICE_NAME,
// and its metrics go out over OTLP too; OTEL_TRACES_EXPORTER=none and
// OTEL_METRICS_EXPORTER=none send nothing.
func TestRelayServiceOTLP(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	rcv := newOTLPReceiver(t)
	traceID, _ := hex.DecodeString("4bf92f3577b34da6a3ce929d0e0e4736")
	parentID, _ := hex.DecodeString("00f067aa0ba902b7")
	id := core.NewID()
	o.exec(t, "INSERT INTO "+o.table()+` (id, event_type, payload, headers) VALUES ($1, 'order.placed', '{}', '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}')`, id.String())

	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.url, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_SERVICE_NAME=relay-under-test",
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_METRIC_EXPORT_INTERVAL=200"}
	p := start(t, append(qstashEnv(), otel...), q.relayArgs(o, "--wakeup", "poll")...)
	var span *tracepb.Span
	var service string
	waitFor(t, 30*time.Second, "the relay's span in the producer's trace", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		span, service = rcv.producerSpan(traceID, parentID)
		return span != nil
	})
	if service != "relay-under-test" || span.Kind != tracepb.Span_SPAN_KIND_PRODUCER || !strings.HasPrefix(span.Name, "publish") {
		t.Errorf("span %q kind %v of service %q, want a producer span \"publish ...\" of relay-under-test", span.Name, span.Kind, service)
	}
	waitFor(t, 30*time.Second, "the relay's metrics over OTLP", func() bool { return rcv.hasMetric("outboxkit.events.pending") })
	started := logLines(p, "relay started")
	if len(started) != 1 || !strings.Contains(started[0]["otlp_traces"].(string), "http/protobuf") {
		t.Errorf("the start line does not say where traces go: %v", started)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d:\n%s", code, p.stderr)
	}

	// none: nothing is sent, though an endpoint is set.
	quiet := newOTLPReceiver(t)
	o.insertSQL(t, 2, "order.placed")
	none := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + quiet.url, "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_METRIC_EXPORT_INTERVAL=200"}
	p = start(t, append(qstashEnv(), none...), q.relayArgs(o, "--wakeup", "poll")...)
	waitFor(t, 30*time.Second, "the events relayed", func() bool { return len(q.got()) == 3 })
	p.signal(t, syscall.SIGTERM) // flushes whatever exporter there is
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d:\n%s", code, p.stderr)
	}
	quiet.mu.Lock()
	defer quiet.mu.Unlock()
	if quiet.posts != 0 {
		t.Errorf("with OTEL_*_EXPORTER=none the relay sent %d OTLP request(s)", quiet.posts)
	}
}
