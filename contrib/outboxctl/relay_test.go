package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// TestRelayDeliversPlainSQLInserts is the public contract end to end: rows
// a service in any language inserted with only id, event_type and payload
// reach a consumer endpoint that verifies QStash's signature, with their IDs
// as CloudEvents ce-id, and the relay stops cleanly on SIGTERM.
func TestRelayDeliversPlainSQLInserts(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	before := o.insertSQL(t, 20, "order.placed") // waiting before any relay runs

	p := start(t, qstashEnv(), q.relayArgs(o)...)
	after := o.insertSQL(t, 15, "order.shipped") // woken by NOTIFY (or the poll)

	want := append(before, after...)
	waitFor(t, 30*time.Second, "every inserted event at the consumer", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return len(q.got()) == len(want)
	})
	got := q.got()
	for _, id := range want {
		if got[id] == 0 {
			t.Errorf("event %s never reached the consumer", id)
		}
	}
	q.mu.Lock()
	for _, id := range after {
		if e := q.events[id]; e.Type != "order.shipped" || string(e.Payload) == "" {
			t.Errorf("event %s arrived as type %q payload %s", id, e.Type, e.Payload)
		}
	}
	q.mu.Unlock()
	waitFor(t, 10*time.Second, "every row marked published", func() bool {
		return o.count(t, "published_at IS NULL") == 0
	})

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM, want 0:\n%s", code, p.stderr)
	}
	// --log-format json: every stderr line is a JSON object.
	var msgs []string
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		var line struct{ Msg string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		msgs = append(msgs, line.Msg)
	}
	for _, m := range []string{"relay started", "relay stopped"} {
		if !strings.Contains(strings.Join(msgs, "|"), m) {
			t.Errorf("logs lack %q: %v", m, msgs)
		}
	}
}

// TestRelaySIGTERMReleasesLeases stops a relay while its publish hangs: the
// relay must cancel the publish after --shutdown-timeout and release the
// events, so no row stays leased by a dead process until its lease expires.
func TestRelaySIGTERMReleasesLeases(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	var publishes atomic.Int32
	unblock := make(chan struct{})
	q := newDevQStash(t, func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/keys" { // the relay's start-up check
				api.ServeHTTP(w, r)
				return
			}
			// A QStash that never answers a publish.
			publishes.Add(1)
			select {
			case <-r.Context().Done():
			case <-unblock:
			}
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		})
	})
	t.Cleanup(func() { close(unblock) }) // runs before the server closes
	ids := o.insertSQL(t, 12, "invoice.sent")

	p := start(t, qstashEnv(), q.relayArgs(o,
		"--lease", "2m", "--publish-timeout", "1m", "--shutdown-timeout", "300ms", "--batch-size", "5", "--concurrency", "2")...)
	waitFor(t, 20*time.Second, "two batches leased and their publishes hanging", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return publishes.Load() >= 2 && o.count(t, "lease_token IS NOT NULL AND lease_until > now()") == 10
	})

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM, want 0:\n%s", code, p.stderr)
	}
	// The dead relay holds nothing: every unpublished row is claimable now
	// (not in 2 minutes), and the cancelled attempt is not counted.
	if n := o.count(t, "published_at IS NULL AND dead_at IS NULL AND lease_token IS NOT NULL AND lease_until > now()"); n != 0 {
		t.Fatalf("%d row(s) still leased by the stopped relay", n)
	}
	if n := o.count(t, "published_at IS NULL AND dead_at IS NULL"); n != len(ids) {
		t.Fatalf("%d pending rows, want all %d", n, len(ids))
	}
	if n := o.count(t, "attempts <> 0"); n != 0 {
		t.Errorf("%d row(s) kept the attempt the shutdown cancelled", n)
	}
	if !strings.Contains(p.stderr.String(), "shutting down") {
		t.Errorf("no shutdown log line:\n%s", p.stderr)
	}
}

// TestRelayRoutesFileAndDrain routes by event type from a file and runs the
// relay once with --drain, as a cron job would.
func TestRelayRoutesFileAndDrain(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	routed := o.insertSQL(t, 4, "order.placed")
	unrouted := o.insertSQL(t, 2, "order.unknown")

	routes := filepath.Join(t.TempDir(), "routes.txt")
	if err := os.WriteFile(routes, []byte("# type = destination\n\norder.placed = "+q.consumer+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, qstashEnv(), o.args("relay", "--qstash-url", q.url, "--routes", routes, "--drain", "--max-attempts", "1")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "drained 6 event(s)") {
		t.Errorf("stdout %q does not report 6 drained events", r.stdout)
	}
	waitFor(t, 20*time.Second, "routed events at the consumer", func() bool { return len(q.got()) == len(routed) })
	// No route is configuration, not the events' fault: even with
	// --max-attempts 1 they stay pending, attempts untouched, with the
	// reason recorded, until a route is deployed.
	for _, id := range unrouted {
		if n := o.count(t, "id = $1 AND dead_at IS NULL AND published_at IS NULL AND attempts = 0 AND last_error LIKE '%destination%'", id.String()); n != 1 {
			t.Errorf("unrouted event %s was not kept pending with its reason", id)
		}
	}

	// The JSON form of the routes file works the same way.
	more := o.insertSQL(t, 3, "order.paid")
	if err := os.WriteFile(routes, []byte(`{"order.paid": {"url": "`+q.consumer+`"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	wantOK(t, cli(t, qstashEnv(), o.args("relay", "--qstash-url", q.url, "--routes", routes, "--drain")...))
	waitFor(t, 20*time.Second, "JSON-routed events at the consumer", func() bool {
		got := q.got()
		for _, id := range more {
			if got[id] == 0 {
				return false
			}
		}
		return true
	})
}

// TestRelayDeletePublished: with --delete-published a delivered event
// leaves no row behind.
func TestRelayDeletePublished(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	ids := o.insertSQL(t, 4, "order.placed")
	r := cli(t, qstashEnv(), o.args("relay", "--qstash-url", q.url, "--destination", q.consumer, "--drain", "--delete-published")...)
	wantOK(t, r)
	if n := o.count(t, "true"); n != 0 {
		t.Errorf("%d rows left after relaying with --delete-published", n)
	}
	waitFor(t, 20*time.Second, "the events at the consumer", func() bool { return len(q.got()) == len(ids) })
}

// TestRelayZeroShutdownTimeout: --shutdown-timeout 0s used to become the
// library's default of 10s (zero means "default" in core.RelayConfig); it
// means no grace: in-flight publishes are cancelled at once.
func TestRelayZeroShutdownTimeout(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	var publishes atomic.Int32
	unblock := make(chan struct{})
	q := newDevQStash(t, func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/keys" {
				api.ServeHTTP(w, r)
				return
			}
			publishes.Add(1)
			select {
			case <-r.Context().Done():
			case <-unblock:
			}
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		})
	})
	t.Cleanup(func() { close(unblock) })
	o.insertSQL(t, 3, "invoice.sent")

	p := start(t, qstashEnv(), q.relayArgs(o, "--lease", "2m", "--publish-timeout", "1m", "--shutdown-timeout", "0s")...)
	waitFor(t, 20*time.Second, "a publish hanging", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return publishes.Load() >= 1
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM, want 0:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), `"shutdown_timeout":"0s"`) {
		t.Errorf("the shutdown did not run with no grace period:\n%s", p.stderr)
	}
	if n := o.count(t, "published_at IS NULL AND lease_token IS NOT NULL AND lease_until > now()"); n != 0 {
		t.Errorf("%d row(s) still leased by the stopped relay", n)
	}
}

// TestRelayWakeupURL: --wakeup-url gives the wake-up connection a URL of
// its own (PostgreSQL itself, for relays whose --database-url goes
// through PgBouncer), and with --wakeup listen that connection LISTENs.
// The poll interval is an hour, so the event inserted after the LISTEN
// began can only arrive through it.
func TestRelayWakeupURL(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	app := "outboxctl-wakeup-" + strings.ToLower(core.NewID().String()[:8])
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	qv := u.Query()
	qv.Set("application_name", app)
	u.RawQuery = qv.Encode()
	args := q.relayArgs(o, "--wakeup", "listen", "--wakeup-url", u.String(), "--poll-interval", "1h")
	p := start(t, qstashEnv(), args...)
	waitFor(t, 30*time.Second, "a LISTEN on the wake-up URL's connection", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		var n int
		if err := o.pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	ids := o.insertSQL(t, 1, "order.placed")
	o.exec(t, "SELECT pg_notify($1, '')", o.schema+".outbox_events")
	waitFor(t, 30*time.Second, "the notified event at the consumer", func() bool { return q.got()[ids[0]] > 0 })
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM, want 0:\n%s", code, p.stderr)
	}
}

// TestRelayWakeupFlag: a mistyped --wakeup, or one --no-notify
// contradicts, is a usage error before anything connects.
func TestRelayWakeupFlag(t *testing.T) {
	t.Parallel()
	r := cli(t, qstashEnv(), "relay", "--destination", "https://example.com/hook", "--wakeup", "wal")
	wantOneLineError(t, r, 2, `--wakeup "wal"`, "auto, listen or poll")
	r = cli(t, qstashEnv(), "relay", "--destination", "https://example.com/hook", "--wakeup", "listen", "--no-notify")
	wantOneLineError(t, r, 2, "--no-notify contradicts --wakeup listen")
}
