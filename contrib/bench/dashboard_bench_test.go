package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/contrib/dashboard"
	"github.com/outboxkit/outboxkit/postgres"
)

// BenchmarkDashboard measures the dashboard's pages (contrib/dashboard)
// on an outbox of -dashboard-events rows (1,000,000 by default, through
// OUTBOXKIT_BENCH_DASHBOARD_EVENTS): 90 % published over the last six
// hours (so 15 % of the table in the last hour, which the charts read),
// 9 % pending (2,000 of them leased), 1 % dead-lettered with 20 kinds of
// error; four destinations, twenty types, 50,000 aggregates. One op is one
// page, served by a fresh handler (so the overview's 2 s cache never
// answers) over loopback HTTP, as a browser asks for it; ms/op is the
// median, max-ms the slowest. The targets are 300 ms for the overview and
// 200 ms for an events page.
//
//	go test -run '^$' -bench Dashboard -benchtime 20x ./contrib/bench/
func BenchmarkDashboard(b *testing.B) {
	ctx := context.Background()
	n := 1_000_000
	if s := os.Getenv("OUTBOXKIT_BENCH_DASHBOARD_EVENTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 10_000 {
			b.Fatalf("OUTBOXKIT_BENCH_DASHBOARD_EVENTS=%q: give at least 10000", s)
		}
		n = v
	}
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	admin, err := newPool(ctx, o.dsn, 2)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	s, err := outboxSchema(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.drop() }()
	t0 := time.Now()
	if err := preloadDashboard(ctx, s, n); err != nil {
		b.Fatal(err)
	}
	b.Logf("preloaded %d events in %v", n, time.Since(t0).Round(time.Second))
	pool, err := newPool(ctx, o.dsn, 4)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	cfg := dashboard.Config{
		Targets: []dashboard.Target{{Pool: pool, Schema: s.name, Table: postgres.DefaultTable}},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	// A fresh handler per request: nothing cached between them.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, err := dashboard.New(cfg)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := srv.Client()

	fetch := func(b *testing.B, path string) string {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %s %.300s", path, resp.Status, body)
		}
		if strings.Contains(string(body), `class="error"`) {
			b.Fatalf("GET %s shows an error: %s", path, regexp.MustCompile(`(?s)class="error"[^>]*>(.*?)<`).FindStringSubmatch(string(body)))
		}
		return string(body)
	}
	// The pages a later page and an event come from.
	first := fetch(b, "/events")
	next := regexp.MustCompile(`href="/events\?([^"]+)" rel="next"`).FindStringSubmatch(first)
	id := regexp.MustCompile(`/event\?id=([0-9a-f-]{36})`).FindStringSubmatch(first)
	if next == nil || id == nil {
		b.Fatalf("the first events page has no next page or no event link")
	}
	nextQ, _ := url.QueryUnescape(strings.ReplaceAll(next[1], "&amp;", "&"))
	pages := []struct{ name, path string }{
		{"overview", "/api/overview"},
		{"overview-html", "/"},
		{"events-all", "/events"},
		{"events-all-page2", "/events?" + nextQ},
		{"events-pending", "/events?state=pending"},
		{"events-leased", "/events?state=leased"},
		{"events-published", "/events?state=published"},
		{"events-dead", "/events?state=dead"},
		{"events-type", "/events?type=type.7"},
		{"events-published-destination", "/events?state=published&destination=https%3A%2F%2Fbilling.example%2Fhook"},
		{"events-aggregate", "/events?aggregate=order%2F4242"},
		{"events-last-10min", "/events?state=published&since=" + url.QueryEscape(time.Now().UTC().Add(-10*time.Minute).Format("2006-01-02T15:04"))},
		{"event", "/event?id=" + id[1]},
		{"deadletters", "/deadletters"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			durs := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t := time.Now()
				fetch(b, p.path)
				durs = append(durs, time.Since(t))
			}
			slices.Sort(durs)
			b.ReportMetric(msOf(durs[len(durs)/2]), "ms/op")
			b.ReportMetric(msOf(durs[len(durs)-1]), "max-ms")
		})
	}
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// preloadDashboard writes the benchmark's outbox in transactions of
// growthChunk rows, then VACUUM ANALYZE and CHECKPOINT, as preloadOutbox
// does.
func preloadDashboard(ctx context.Context, s *schema, n int) error {
	tbl := s.table(postgres.DefaultTable)
	for start := 0; start < n; start += growthChunk {
		end := min(start+growthChunk, n)
		// Row i: published (90 %), pending (9 %, 2,000 of them leased) or
		// dead (1 %); created over the last six hours, newest last.
		q := `INSERT INTO ` + tbl + ` (id, event_type, payload, destination, aggregate_type, aggregate_id, headers,
	created_at, available_at, published_at, dead_at, last_error, attempts, lease_token, lease_until)
SELECT ` + uuidV7 + `, 'type.' || (i % 20), ` + growthPayload + `,
	(ARRAY['https://billing.example/hook', 'https://shipping.example/hook', 'analytics', ''])[1 + i % 4],
	'order', (i % 50000)::text, '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
	c, c,
	CASE WHEN i % 100 < 90 THEN c + (5 + i % 200) * interval '1 ms' END,
	CASE WHEN i % 100 = 99 THEN c + interval '1 minute' END,
	CASE WHEN i % 100 = 99 THEN 'publish: POST https://shipping.example/hook: ' || (500 + i % 20) || ' Server Error (request ' || i || ')' END,
	CASE WHEN i % 100 < 90 THEN 1 WHEN i % 100 = 99 THEN 10 ELSE 0 END,
	CASE WHEN i % 100 BETWEEN 90 AND 98 AND i % 45 = 0 THEN gen_random_uuid() END,
	CASE WHEN i % 100 BETWEEN 90 AND 98 AND i % 45 = 0 THEN now() + interval '5 minutes' END
FROM (SELECT i, now() - (($3::bigint - i) * 21600.0 / $3::bigint) * interval '1 s' AS c FROM generate_series($1::bigint, $2::bigint) i) g`
		if _, err := s.pool.Exec(ctx, q, start, end-1, n); err != nil {
			return fmt.Errorf("preload dashboard rows %d-%d: %w", start, end, err)
		}
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+tbl); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, "CHECKPOINT")
	return err
}
