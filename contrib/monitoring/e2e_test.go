package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The end-to-end test's version of OutboxOldestPendingTooOld: the same
// expression with the threshold and the `for:` scaled from minutes to
// seconds, so the alert fires and clears within the test's budget.
const (
	testAgeThreshold = "3"  // seconds; alerts.yml says 300
	testAgeFor       = "2s" // alerts.yml says 5m
	// testScrape is how often the test's Prometheus scrapes the relay and
	// evaluates the rules.
	testScrape = "1s"
)

// productionThreshold is the comparison alerts.yml's
// OutboxOldestPendingTooOld ends with; testRules replaces its number only.
var productionThreshold = regexp.MustCompile(`>\s*300\s*$`)

// testRules returns alerts.yml for the end-to-end test's Prometheus. Every
// rule is kept, expressions included, so a real Prometheus loads and
// evaluates exactly what operators deploy; only OutboxOldestPendingTooOld's
// threshold constant (300 s → 3 s) and its `for:` (5m → 2s) change, since a
// test cannot wait ten minutes. The rewrite is of the parsed YAML, not of
// text, and fails if the expression no longer ends in "> 300": then this
// test and alerts.yml disagree about what is being tested.
func testRules(t *testing.T) []byte {
	t.Helper()
	f := readRules(t, alertsFile)
	found := false
	for gi := range f.Groups {
		for ri := range f.Groups[gi].Rules {
			r := &f.Groups[gi].Rules[ri]
			if r.Alert != "OutboxOldestPendingTooOld" {
				continue
			}
			if !productionThreshold.MatchString(r.Expr) {
				t.Fatalf("OutboxOldestPendingTooOld's expression %q does not end in \"> 300\": update testRules to the new threshold", r.Expr)
			}
			r.Expr = productionThreshold.ReplaceAllString(r.Expr, "> "+testAgeThreshold)
			r.For = testAgeFor
			found = true
		}
	}
	if !found {
		t.Fatal("alerts.yml has no OutboxOldestPendingTooOld")
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// gate stands in front of the QStash API the relay publishes to. Closed,
// it stops answering: requests are held, unanswered, until the relay gives
// up on them (--publish-timeout) or the gate opens, and then the
// connection is dropped without a response. That is what a transport
// that stopped answering looks like to a relay, and the way events stay
// pending in the outbox: once QStash has accepted an event the outbox
// counts it published, whatever the consumer endpoint behind QStash does.
type gate struct {
	mu      sync.Mutex
	blocked chan struct{} // non-nil while closed; closed when the gate opens
	quit    chan struct{}
	held    atomic.Int64 // requests not answered
}

func newGate() *gate { return &gate{quit: make(chan struct{})} }

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		wait := g.blocked
		g.mu.Unlock()
		if wait == nil {
			h.ServeHTTP(w, r)
			return
		}
		g.held.Add(1)
		select {
		case <-r.Context().Done():
		case <-wait:
		case <-g.quit:
		}
		panic(http.ErrAbortHandler) // drop the connection, answer nothing
	})
}

func (g *gate) stopAnswering() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.blocked == nil {
		g.blocked = make(chan struct{})
	}
}

func (g *gate) answer() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.blocked != nil {
		close(g.blocked)
		g.blocked = nil
	}
}

// consumer is the endpoint QStash delivers to: it verifies each delivery
// and records the event IDs it saw.
type consumer struct {
	url string
	mu  sync.Mutex
	got map[core.ID]bool
}

func (c *consumer) seen(ids []core.ID) (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		if c.got[id] {
			n++
		}
	}
	return n == len(ids), fmt.Sprintf("%d of %d events delivered", n, len(ids))
}

// devQStash starts qstashdev behind g and a consumer, both in process.
func devQStash(t *testing.T, g *gate) (apiURL string, c *consumer) {
	t.Helper()
	dev, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(g.wrap(dev.Handler()))
	c = &consumer{got: map[core.ID]bool{}}
	var recv atomic.Pointer[qstash.Receiver]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { recv.Load().ServeHTTP(w, r) }))
	c.url = srv.URL + "/events"
	keys := dev.Keys()
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: keys.Current, NextSigningKey: keys.Next, URL: c.url,
		Handler: core.HandlerFunc(func(_ context.Context, e core.Event) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.got[e.ID] = true
			return nil
		}),
		Deduper:  memory.NewDeduper(),
		Consumer: "monitoring-e2e",
	})
	if err != nil {
		t.Fatal(err)
	}
	recv.Store(rc)
	t.Cleanup(func() {
		close(g.quit)
		api.Close()
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		srv.Close()
	})
	return api.URL, c
}

// prometheusServer is a Prometheus the test runs.
type prometheusServer struct{ url string }

// startPrometheus runs Debian's prometheus on a free loopback port with a
// configuration of the test's own, scraping target every testScrape and
// evaluating rules as often.
func startPrometheus(t *testing.T, target string, rules []byte) prometheusServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not in PATH: install Debian's prometheus package (apt-get install --no-install-recommends prometheus; .ci/services.sh does). The test starts its own server on a free loopback port; none needs to run.")
	}
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesFile, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
rule_files:
  - %[2]q
scrape_configs:
  - job_name: outboxkit-relay
    static_configs:
      - targets: [%[3]q]
`, testScrape, rulesFile, target)
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := startProc(t, "prometheus", environ(), bin,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	s := prometheusServer{url: "http://" + addr}
	waitFor(t, 30*time.Second, "Prometheus ready on "+addr, func() (bool, string) {
		p.alive(t)
		code, body, err := httpGet(s.url + "/-/ready")
		return err == nil && code == http.StatusOK, fmt.Sprint(code, " ", strings.TrimSpace(body), " ", err)
	})
	return s
}

// query runs an instant query and returns its vector.
func (s prometheusServer) query(q string) (model.Vector, error) {
	code, body, err := httpGet(s.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     model.Vector `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		return nil, fmt.Errorf("query %s: HTTP %d: %v: %s", q, code, err, body)
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, resp.Error)
	}
	return resp.Data.Result, nil
}

// alertState is the state ("pending", "firing", or "" when absent) of the
// named alert for schema, from /api/v1/alerts.
func (s prometheusServer) alertState(name, schema string) (string, error) {
	_, body, err := httpGet(s.url + "/api/v1/alerts")
	if err != nil {
		return "", err
	}
	var resp struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || resp.Status != "success" {
		return "", fmt.Errorf("/api/v1/alerts: %v: %s", err, body)
	}
	for _, a := range resp.Data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["schema"] == schema {
			return a.State, nil
		}
	}
	return "", nil
}

// TestPrometheusAlertsOnARealRelay is the monitoring stack end to end: a real
// `outboxctl relay` (the built binary) on PostgreSQL, publishing to an
// in-process qstashdev, scraped every second by a real Prometheus that
// evaluates alerts.yml's rules (OutboxOldestPendingTooOld scaled to seconds,
// see testRules). When the transport stops answering, events stay pending,
// the oldest pending age grows and the alert fires; when it answers again
// the relay drains the backlog and the alert clears. Then the relay's
// /metrics is checked against every metric the rules and the dashboard use.
func TestPrometheusAlertsOnARealRelay(t *testing.T) {
	t.Parallel()
	start := time.Now()
	bin := outboxctl(t)

	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "monitoring")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	insert := func(n int) []core.ID {
		ids := make([]core.ID, n)
		for i := range ids {
			ids[i] = core.NewID()
			// Plain SQL, as a writer in any language would.
			if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`".outbox_events (id, event_type, payload) VALUES ($1, 'order.placed', '{}')`, ids[i].String()); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	pending := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".outbox_events WHERE published_at IS NULL AND dead_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	g := newGate()
	apiURL, cons := devQStash(t, g)
	relayAddr := freeAddr(t)
	relay := startProc(t, "outboxctl relay",
		environ("DATABASE_URL="+pgtest.URL(), "QSTASH_TOKEN="+qstashdev.DefaultToken),
		bin, "relay", "--schema", schema,
		"--qstash-url", apiURL, "--destination", cons.url,
		"--http-addr", relayAddr,
		// Fast enough for a test: a publish the gate holds is given up
		// after a second, and retried within half a second once the
		// gate answers again.
		"--poll-interval", "50ms", "--publish-timeout", "1s", "--lease", "5s",
		"--initial-backoff", "100ms", "--max-backoff", "500ms",
		"--log-format", "json")
	metricsURL := "http://" + relayAddr + "/metrics"
	waitFor(t, 30*time.Second, "the relay's /metrics with this schema's oldest pending age", func() (bool, string) {
		relay.alive(t)
		code, body, err := httpGet(metricsURL)
		return err == nil && code == http.StatusOK && strings.Contains(body, `schema="`+schema+`"`), fmt.Sprint(code, " ", err)
	})

	prom := startPrometheus(t, relayAddr, testRules(t))
	ageQuery := `outboxkit_events_oldest_pending_age_seconds{job="outboxkit-relay", schema="` + schema + `"}`
	waitFor(t, 30*time.Second, "Prometheus to scrape the relay", func() (bool, string) {
		up, err := prom.query(`up{job="outboxkit-relay"} == 1`)
		if err != nil || len(up) == 0 {
			return false, fmt.Sprint("up: ", up, " ", err)
		}
		age, err := prom.query(ageQuery)
		return err == nil && len(age) == 1, fmt.Sprint("age: ", age, " ", err)
	})

	// Events flow: delivered, nothing pending, no alert.
	flowing := insert(5)
	waitFor(t, 30*time.Second, "the first events at the consumer", func() (bool, string) { return cons.seen(flowing) })
	waitFor(t, 10*time.Second, "nothing pending", func() (bool, string) { n := pending(); return n == 0, fmt.Sprint(n, " pending") })
	if st, err := prom.alertState("OutboxOldestPendingTooOld", schema); err != nil || st != "" {
		t.Fatalf("OutboxOldestPendingTooOld is %q (%v) while events flow", st, err)
	}

	// The transport stops answering: events stay pending and age.
	g.stopAnswering()
	stuck := insert(3)
	stoppedAt := time.Now()
	waitFor(t, 40*time.Second, "OutboxOldestPendingTooOld to fire", func() (bool, string) {
		relay.alive(t)
		st, err := prom.alertState("OutboxOldestPendingTooOld", schema)
		return err == nil && st == "firing", fmt.Sprintf("state %q, err %v", st, err)
	})
	t.Logf("OutboxOldestPendingTooOld fired %.1fs after the transport stopped answering", time.Since(stoppedAt).Seconds())
	if g.held.Load() == 0 {
		t.Fatal("the alert fired, but the relay never reached the stopped transport: the test did not test what it says")
	}
	if n := pending(); n != len(stuck) {
		t.Fatalf("%d events pending while the transport does not answer, want %d", n, len(stuck))
	}
	if age, err := prom.query(ageQuery); err != nil || len(age) != 1 || float64(age[0].Value) <= 3 {
		t.Fatalf("the alert fired, but the scraped age is %v (%v), not above %ss", age, err, testAgeThreshold)
	}

	// It answers again: the relay drains the backlog and the alert clears.
	g.answer()
	answeredAt := time.Now()
	waitFor(t, 30*time.Second, "the held events at the consumer", func() (bool, string) { return cons.seen(stuck) })
	waitFor(t, 40*time.Second, "OutboxOldestPendingTooOld to clear", func() (bool, string) {
		relay.alive(t)
		st, err := prom.alertState("OutboxOldestPendingTooOld", schema)
		return err == nil && st == "", fmt.Sprintf("state %q, err %v", st, err)
	})
	t.Logf("OutboxOldestPendingTooOld cleared %.1fs after the transport answered again", time.Since(answeredAt).Seconds())

	checkServedMetrics(t, metricsURL, schema)
	t.Logf("end to end in %.1fs (build included)", time.Since(start).Seconds())
}

// onlyAfterFailures are families the exporter creates on their first data
// point, which only a failed settle or a failed tenant gives: the
// end-to-end scenario has neither, so the tracing ones are checked against
// the exporter in process (TestMetricsAsTheExporterServesThem) instead.
var onlyAfterFailures = map[string]bool{
	"outboxkit_settle_errors_total":    true,
	"outboxkit_events_unsettled_total": true,
	"outboxctl_tenant_failures_total":  true,
}

// onlyPartitioned are families served for partitioned tables only
// (outboxctl migrate --partitions); the end-to-end relay's is plain, and
// contrib/outboxctl's TestRelayServiceRetentionPartitions reads them from
// a relay on a partitioned one.
var onlyPartitioned = map[string]bool{
	"outboxctl_partitions_ahead_seconds":            true,
	"outboxctl_retention_partitions_created_total":  true,
	"outboxctl_retention_partitions_dropped_total":  true,
	"outboxctl_retention_dead_letters_moved_total":  true,
	"outboxctl_retention_vacuums_total":             true,
	"outboxctl_retention_vacuum_time_seconds_total": true,
}

// usedFamilies are the families the rules and the dashboard query.
func usedFamilies(t *testing.T) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	add := func(expr string) {
		for _, s := range ourSeries(expr) {
			if m, ok := FamilyOf(s); ok {
				used[m.Name] = true
			} else {
				t.Errorf("%s is used but not listed in Metrics()", s)
			}
		}
	}
	for _, r := range readRules(t, alertsFile).rules() {
		add(r.Expr)
	}
	for _, p := range readDashboard(t).allPanels() {
		for _, tg := range p.Targets {
			add(tg.Expr)
		}
	}
	return used
}

// checkServedMetrics scrapes the relay and fails for every family the rules
// or the dashboard use that it does not serve, with the tenant's labels.
func checkServedMetrics(t *testing.T, metricsURL, schema string) {
	t.Helper()
	code, body, err := httpGet(metricsURL)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", metricsURL, code, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	for name := range usedFamilies(t) {
		m, _ := lookup(name)
		f, ok := families[name]
		if !ok {
			if onlyAfterFailures[name] {
				t.Logf("%s: not served (nothing failed that way in this scenario)", name)
				continue
			}
			if onlyPartitioned[name] {
				t.Logf("%s: not served (the table is not partitioned in this scenario)", name)
				continue
			}
			t.Errorf("the rules or the dashboard use %s, which outboxctl relay does not serve", name)
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != m.Type {
			t.Errorf("outboxctl relay serves %s as a %s, listed as a %s", name, got, m.Type)
		}
		found := false
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !m.NoTenant && labels["schema"] != schema {
				continue
			}
			found = true
			want := m.Labels
			if !m.NoTenant {
				want = append(TenantLabels(), m.Labels...)
			}
			for _, l := range want {
				if labels[l] == "" {
					t.Errorf("%s has no %s label: %v", name, l, labels)
				}
			}
		}
		if !found {
			t.Errorf("%s has no series for schema %s", name, schema)
		}
	}
}
