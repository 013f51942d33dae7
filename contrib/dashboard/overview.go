package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/postgres"
)

// historyMinutes is the charts' span: the last hour, one point a minute.
const historyMinutes = 60

// overviewCacheFor is how long one overview is reused: many browsers
// refreshing at once cost the database one set of statements.
const overviewCacheFor = 2 * time.Second

// defaultDestination labels events with no destination of their own
// (routed by the relay's --routes or --destination).
const defaultDestination = "(relay's default)"

// destStats is one destination of one table.
type destStats struct {
	Destination      string  `json:"destination"`
	Pending          int64   `json:"pending"`
	Leased           int64   `json:"leased"`
	Dead             int64   `json:"dead"`
	OldestAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	PublishedHour    int64   `json:"published_last_hour"`
	// Commit → publish latency over the last hour, in milliseconds
	// (within 19 %: read from a histogram).
	P50 *float64 `json:"latency_p50_ms"`
	P95 *float64 `json:"latency_p95_ms"`
	P99 *float64 `json:"latency_p99_ms"`

	hist map[int]int64
}

// series are one table's charts: a point per minute.
type series struct {
	// T is each minute's start, Unix seconds.
	T []int64 `json:"t"`
	// Rate is events published per second, per destination.
	Rate map[string][]float64 `json:"rate"`
	// P50 and P95 are the commit → publish latency percentiles of the
	// minute's published events (all destinations), in milliseconds;
	// null in a minute with none.
	P50 []*float64 `json:"p50"`
	P95 []*float64 `json:"p95"`
}

// targetOverview is one table's overview.
type targetOverview struct {
	Index            int         `json:"index"`
	Label            string      `json:"label"`
	Database         string      `json:"database"`
	Schema           string      `json:"schema"`
	Table            string      `json:"table"`
	Inbox            bool        `json:"inbox"`
	Pending          int64       `json:"pending"`
	Leased           int64       `json:"leased"`
	Dead             int64       `json:"dead"`
	OldestAgeSeconds float64     `json:"oldest_pending_age_seconds"`
	PublishedHour    int64       `json:"published_last_hour"`
	Destinations     []destStats `json:"destinations"`
	Chart            series      `json:"chart"`
	// Layout is the table's layout: plain or partitioned, with its
	// partitions and the default partition's rows.
	Layout *tableLayout `json:"layout,omitempty"`
	Error  string       `json:"error,omitempty"`
	// Doctor lists the warnings and critical findings of the table's
	// last cheap doctor run (doctor.go).
	Doctor []postgres.Finding `json:"doctor,omitempty"`
	// At is the database's clock when the overview was read.
	At     time.Time `json:"at"`
	TookMS float64   `json:"took_ms"`
}

// overview is the whole page's data.
type overview struct {
	Targets []*targetOverview `json:"targets"`
	Relays  []relayHealth     `json:"relays"`
	// RefreshSeconds is how often the page refreshes itself.
	RefreshSeconds float64 `json:"refresh_seconds"`
}

func (h *handler) readOverview(ctx context.Context) overview {
	ov := overview{Targets: make([]*targetOverview, len(h.targets)), RefreshSeconds: h.cfg.RefreshInterval.Seconds()}
	var wg sync.WaitGroup
	for i, t := range h.targets {
		wg.Go(func() { ov.Targets[i] = t.overview(ctx, h) })
	}
	wg.Go(func() { ov.Relays = h.relayHealth(ctx) })
	wg.Wait()
	return ov
}

// overview returns t's overview, reusing one younger than
// overviewCacheFor.
func (t *target) overview(ctx context.Context, h *handler) *targetOverview {
	t.mu.Lock()
	defer t.mu.Unlock()
	findings := t.doctorFindings()
	if t.cached != nil && time.Since(t.cachedTime()) < overviewCacheFor {
		return t.withDoctor(t.cached, findings)
	}
	ov, err := t.readOverview(ctx)
	if err != nil {
		h.log.Error("dashboard overview", "table", t.Label(), "err", redactText(err.Error()))
		return &targetOverview{Index: t.idx, Label: t.Label(), Database: t.Name, Schema: t.Schema, Table: t.Table, Inbox: t.Inbox,
			Error: "reading the table failed: " + redactText(err.Error()), Doctor: findings}
	}
	t.cached, t.cachedAt = ov, time.Now().UnixNano()
	return t.withDoctor(ov, findings)
}

func (t *target) cachedTime() time.Time { return time.Unix(0, t.cachedAt) }

// withDoctor is ov with the findings, as a copy: a cached overview is
// shared by concurrent requests.
func (t *target) withDoctor(ov *targetOverview, findings []postgres.Finding) *targetOverview {
	c := *ov
	c.Doctor = findings
	return &c
}

// readOverview runs the overview's four statements at once, each on a
// connection of its own.
func (t *target) readOverview(ctx context.Context) (*targetOverview, error) {
	started := time.Now()
	var now time.Time
	if err := t.Pool.QueryRow(ctx, dbNowSQL).Scan(&now); err != nil {
		return nil, fmt.Errorf("read the database clock: %w", err)
	}
	nowMinute := now.Unix() / 60
	fromMinute := nowMinute - historyMinutes + 1
	dests := map[string]*destStats{}
	dest := func(name string) *destStats {
		if name == "" {
			name = defaultDestination
		}
		d := dests[name]
		if d == nil {
			d = &destStats{Destination: name, hist: map[int]int64{}}
			dests[name] = d
		}
		return d
	}
	type pendingRow struct {
		dest           string
		pending, lease int64
		oldest         pgtype.Timestamptz
	}
	type deadRow struct {
		dest string
		n    int64
	}
	type histRow struct {
		minute int64
		dest   string
		bucket int
		n      int64
	}
	var (
		pend      []pendingRow
		dead      []deadRow
		hist      []histRow
		layout    *tableLayout
		errs      [4]error
		wg        sync.WaitGroup
		queryRows = func(i int, sql string, args []any, scan func(func(...any) error) error) {
			rows, err := t.Pool.Query(ctx, sql, args...)
			if err != nil {
				errs[i] = err
				return
			}
			defer rows.Close()
			for rows.Next() {
				if err := scan(rows.Scan); err != nil {
					errs[i] = err
					return
				}
			}
			errs[i] = rows.Err()
		}
	)
	wg.Go(func() {
		queryRows(0, pendingByDestinationSQL(t.n), nil, func(scan func(...any) error) error {
			var r pendingRow
			err := scan(&r.dest, &r.pending, &r.lease, &r.oldest)
			pend = append(pend, r)
			return err
		})
	})
	wg.Go(func() {
		queryRows(1, deadByDestinationSQL(t.n), nil, func(scan func(...any) error) error {
			var r deadRow
			err := scan(&r.dest, &r.n)
			dead = append(dead, r)
			return err
		})
	})
	wg.Go(func() {
		queryRows(2, publishedHistorySQL(t.n), []any{fromMinute}, func(scan func(...any) error) error {
			var r histRow
			err := scan(&r.minute, &r.dest, &r.bucket, &r.n)
			hist = append(hist, r)
			return err
		})
	})
	wg.Go(func() { layout, errs[3] = readLayout(ctx, t.Pool, t.n) })
	wg.Wait()
	for i, what := range []string{"count pending events", "count dead letters", "read the last hour's published events", "read the table's layout"} {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s: %w", what, errs[i])
		}
	}

	ov := &targetOverview{Index: t.idx, Label: t.Label(), Database: t.Name, Schema: t.Schema, Table: t.Table, Inbox: t.Inbox, At: now, Layout: layout}
	for _, r := range pend {
		d := dest(r.dest)
		d.Pending, d.Leased = r.pending, r.lease
		if r.oldest.Valid {
			d.OldestAgeSeconds = max(now.Sub(r.oldest.Time).Seconds(), 0)
		}
		ov.Pending += r.pending
		ov.Leased += r.lease
		ov.OldestAgeSeconds = max(ov.OldestAgeSeconds, d.OldestAgeSeconds)
	}
	for _, r := range dead {
		dest(r.dest).Dead = r.n
		ov.Dead += r.n
	}
	ov.Chart = series{T: make([]int64, historyMinutes), Rate: map[string][]float64{}, P50: make([]*float64, historyMinutes), P95: make([]*float64, historyMinutes)}
	for i := range ov.Chart.T {
		ov.Chart.T[i] = (fromMinute + int64(i)) * 60
	}
	perMinute := make([]map[int]int64, historyMinutes)
	// The current minute has lasted only this many seconds so far.
	elapsed := max(float64(now.Unix()%60)+float64(now.Nanosecond())/1e9, 1)
	for _, r := range hist {
		i := int(r.minute - fromMinute)
		if i < 0 || i >= historyMinutes {
			continue // published in the future (a clock step), or just now
		}
		d := dest(r.dest)
		rate := ov.Chart.Rate[d.Destination]
		if rate == nil {
			rate = make([]float64, historyMinutes)
			ov.Chart.Rate[d.Destination] = rate
		}
		secs := 60.0
		if i == historyMinutes-1 {
			secs = elapsed
		}
		rate[i] += float64(r.n) / secs
		d.PublishedHour += r.n
		d.hist[r.bucket] += r.n
		ov.PublishedHour += r.n
		if perMinute[i] == nil {
			perMinute[i] = map[int]int64{}
		}
		perMinute[i][r.bucket] += r.n
	}
	for i, m := range perMinute {
		ov.Chart.P50[i] = percentile(m, 0.50)
		ov.Chart.P95[i] = percentile(m, 0.95)
	}
	for _, d := range dests {
		d.P50, d.P95, d.P99 = percentile(d.hist, 0.50), percentile(d.hist, 0.95), percentile(d.hist, 0.99)
		ov.Destinations = append(ov.Destinations, *d)
	}
	slices.SortFunc(ov.Destinations, func(a, b destStats) int {
		return cmp.Or(cmp.Compare(b.Pending+b.Dead, a.Pending+a.Dead), cmp.Compare(a.Destination, b.Destination))
	})
	ov.TookMS = float64(time.Since(started).Microseconds()) / 1000
	return ov, nil
}

// percentile reads the q-quantile from a latency histogram (bucket b
// holds latencies from 2^(b/4) ms), as the bucket's geometric middle, or
// nil for an empty one.
func percentile(hist map[int]int64, q float64) *float64 {
	var total int64
	for _, n := range hist {
		total += n
	}
	if total == 0 {
		return nil
	}
	buckets := make([]int, 0, len(hist))
	for b := range hist {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets)
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for _, b := range buckets {
		seen += hist[b]
		if seen >= rank {
			v := math.Round(math.Pow(2, (float64(b)+0.5)/latencyBucketsPerDoubling)*10) / 10
			return &v
		}
	}
	return nil
}

func (h *handler) overviewPage(w http.ResponseWriter, r *http.Request) {
	ov := h.readOverview(r.Context())
	h.render(w, r, "overview", "Overview", ov)
}

func (h *handler) overviewJSON(w http.ResponseWriter, r *http.Request) {
	ov := h.readOverview(r.Context())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ov)
}
