package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// testDB is a pool and a migrated schema of its own.
type testDB struct {
	pool   *pgxpool.Pool
	schema string
	store  *postgres.Store
	layout postgres.Partitioning
}

// newDB is a schema with the plain layout.
func newDB(t testing.TB) testDB { return newDBLayout(t, postgres.PartitionNone) }

// layouts are the outbox table's layouts the page tests run on.
var layouts = []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionDaily, postgres.PartitionHourly, postgres.PartitionMinutes(15)}

// layoutPeriod is the width of a layout's partitions (a day on the plain
// layout, where it only spreads the seeds' creation times).
func layoutPeriod(t testing.TB, layout postgres.Partitioning) time.Duration {
	switch layout {
	case postgres.PartitionNone, postgres.PartitionDaily:
		return 24 * time.Hour
	case postgres.PartitionHourly:
		return time.Hour
	}
	// PartitionMinutes(m) prints as "<m>m".
	d, err := time.ParseDuration(layout.String())
	if err != nil {
		t.Fatalf("the period of layout %s: %v", layout, err)
	}
	return d
}

// pastPeriods is how far back a partitioned test table has partitions:
// rows created up to that long ago land in a period of their own, not in
// the default partition.
const pastPeriods = 3

// newDBLayout is a schema whose outbox table has the layout: partitioned
// ones have, besides the periods the migration creates, partitions for
// the last pastPeriods periods.
func newDBLayout(t testing.TB, layout postgres.Partitioning) testDB {
	t.Helper()
	pool := pgtest.Pool(t, 6)
	schema := pgtest.Schema(t, pool, "dashboard")
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schema, Partitions: layout}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if layout != postgres.PartitionNone {
		parts, err := postgres.NewPartitions(pool, &postgres.PartitionsConfig{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		period := layoutPeriod(t, layout)
		if _, err := parts.Create(ctxT(t), time.Now().Add(-pastPeriods*period), time.Now()); err != nil {
			t.Fatalf("create past partitions: %v", err)
		}
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return testDB{pool: pool, schema: schema, store: store, layout: layout}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// seedEvent describes an event to write and the state to put it in.
type seedEvent struct {
	Type, AggType, AggID, Dest string
	Payload                    string
	Headers                    map[string]string
	State                      string // pending, leased, published, dead
	Err                        string
	PublishedAgo               time.Duration // published this long ago
	Latency                    time.Duration // created this long before publishing
}

// seed writes events through Store.Add and then moves them to their
// states with plain SQL, returning their IDs in order.
func (db testDB) seed(t testing.TB, evs ...seedEvent) []core.ID {
	t.Helper()
	ctx := ctxT(t)
	ids := make([]core.ID, len(evs))
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var events []core.Event
		for i, s := range evs {
			payload := s.Payload
			if payload == "" {
				payload = `{"n":` + fmt.Sprint(i) + `}`
			}
			e, err := core.NewEvent(s.Type, json.RawMessage(payload))
			if err != nil {
				return err
			}
			e.AggregateType, e.AggregateID, e.Destination, e.Headers = s.AggType, s.AggID, s.Dest, s.Headers
			ids[i] = e.ID
			events = append(events, e)
		}
		return db.store.Add(ctx, tx, events...)
	})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	tbl := pgx.Identifier{db.schema, postgres.DefaultTable}.Sanitize()
	for i, s := range evs {
		var q string
		var args []any
		switch s.State {
		case "", "pending":
			continue
		case "leased":
			q = `UPDATE ` + tbl + ` SET lease_token = gen_random_uuid(), lease_until = now() + interval '5 minutes', attempts = 1 WHERE id = $1`
			args = []any{ids[i].String()}
		case "published":
			q = `UPDATE ` + tbl + ` SET published_at = now() - $2::interval, created_at = now() - $2::interval - $3::interval, attempts = 1 WHERE id = $1`
			args = []any{ids[i].String(), s.PublishedAgo.String(), s.Latency.String()}
		case "dead":
			q = `UPDATE ` + tbl + ` SET dead_at = now(), last_error = $2, attempts = 10 WHERE id = $1`
			args = []any{ids[i].String(), s.Err}
		default:
			t.Fatalf("seed: unknown state %q", s.State)
		}
		if _, err := db.pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("seed %s: %v", s.State, err)
		}
	}
	return ids
}

// logBuffer collects the handler's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// newServer serves a dashboard over db on a loopback httptest server.
func newServer(t testing.TB, db testDB, mod func(*Config)) (*httptest.Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg := Config{
		Targets:  []Target{{Pool: db.pool, Schema: db.schema, Name: "test"}},
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		TraceURL: "http://jaeger.example:16686/trace/{trace_id}",
	}
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, logs
}

// get fetches a page as a loopback client.
func get(t testing.TB, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp, b.String()
}

func newJar(t testing.TB) http.CookieJar {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return jar
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfFrom is a page's CSRF token, "" without a form.
func csrfFrom(page string) string {
	if m := csrfRE.FindStringSubmatch(page); m != nil {
		return m[1]
	}
	return ""
}
