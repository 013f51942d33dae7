package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// runCommand runs outboxctl's command name with args: through the built
// binary once the command is in the command table (app.go), in process
// through the app type until then, with the same environment, streams and
// exit codes either way.
func runCommand(t *testing.T, environ []string, name string, args ...string) result {
	t.Helper()
	for _, c := range commands {
		if c.name == name {
			return cli(t, environ, append([]string{name}, args...)...)
		}
	}
	run := map[string]func(*app, context.Context, []string) error{
		"reconcile": (*app).cmdReconcile,
		"doctor":    (*app).cmdDoctor,
	}[name]
	if run == nil {
		t.Fatalf("no command %q", name)
	}
	vars := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var stdout, stderr bytes.Buffer
	a := &app{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return vars[k] }}
	a.g = globals{
		databaseURL: a.getenv("DATABASE_URL"),
		schema:      envOr(a.getenv, "OUTBOX_SCHEMA", "public"),
		table:       envOr(a.getenv, "OUTBOX_TABLE", "outbox_events"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := a.exit(run(a, ctx, args))
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// shop is a QStash consumer on a qstashdev that records what it applies
// with a postgres.Deduper, silently drops the events in drop (it answers
// 200 and records nothing), and refuses "poison" events for good (489: to
// QStash's DLQ at once).
type shop struct {
	dev      *qstashdev.Server
	api      string // QStash API URL
	endpoint string // the consumer's URL, for --destination

	mu   sync.Mutex
	drop map[core.ID]bool
	hits int
}

func newShop(t *testing.T, o outbox) *shop {
	t.Helper()
	dev, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := httptest.NewServer(dev.Handler())
	s := &shop{dev: dev, api: apiSrv.URL, drop: map[core.ID]bool{}}
	dedup, err := postgres.NewDeduper(o.pool, &postgres.DeduperConfig{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	var recv atomic.Pointer[qstash.Receiver]
	consumerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ce struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &ce)
		id, _ := core.ParseID(ce.ID)
		s.mu.Lock()
		s.hits++
		drop := s.drop[id]
		s.mu.Unlock()
		if drop {
			w.WriteHeader(http.StatusOK) // acknowledged, never applied
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		recv.Load().ServeHTTP(w, r)
	}))
	s.endpoint = consumerSrv.URL + "/orders"
	keys := dev.Keys()
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: keys.Current, NextSigningKey: keys.Next, URL: s.endpoint,
		Handler: core.HandlerFunc(func(ctx context.Context, e core.Event) error {
			if e.Type == "poison" {
				return core.Permanent(errors.New("cannot decode a poison order"))
			}
			return nil
		}),
		Deduper: dedup, Consumer: "shop",
	})
	if err != nil {
		t.Fatal(err)
	}
	recv.Store(rc)
	t.Cleanup(func() {
		apiSrv.Close()
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		consumerSrv.Close()
	})
	return s
}

func (s *shop) deliveries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

// reportLine reports whether the text report has a line whose first
// fields are label and value.
func reportLine(report, label, value string) bool {
	for _, line := range strings.Split(report, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == label && f[1] == value {
			return true
		}
	}
	return false
}

func ids(evs []postgres.ReconcileEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID.String()
	}
	slices.Sort(out)
	return out
}

func idStrings(list ...core.ID) []string {
	out := make([]string, len(list))
	for i, id := range list {
		out[i] = id.String()
	}
	slices.Sort(out)
	return out
}

// TestReconcileThroughQStash relays 100 orders and a poison one through
// the built relay and qstashdev to a consumer that silently drops every
// 50th: reconcile names exactly the three that were never applied, with
// QStash's state for each, and replays exactly those.
func TestReconcileThroughQStash(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	s := newShop(t, o)
	var orders []core.Event
	for range 100 {
		orders = append(orders, event(t, "order.placed", "", ""))
	}
	poison := event(t, "poison", "", "")
	o.add(t, append(orders, poison)...)
	s.mu.Lock()
	s.drop[orders[49].ID], s.drop[orders[99].ID] = true, true
	s.mu.Unlock()
	dropped := map[core.ID]bool{orders[49].ID: true, orders[99].ID: true}

	environ := env("QSTASH_TOKEN=" + qstashdev.DefaultToken)
	wantOK(t, cli(t, environ, o.args("relay", "--qstash-url", s.api, "--destination", s.endpoint, "--drain", "--log-format", "json")...))
	waitFor(t, 30*time.Second, "QStash to deliver every order and dead-letter the poison one", func() bool {
		return s.deliveries() >= 101 && len(s.dev.DLQ()) == 1
	})

	reconcile := func(extra ...string) (result, reconcileJSON) {
		t.Helper()
		r := runCommand(t, environ, "reconcile", o.args(append([]string{"--consumer", "shop", "--grace", "0s", "--qstash-url", s.api, "--json"}, extra...)...)...)
		var rep reconcileJSON
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.ReconcileReport == nil {
			t.Fatalf("reconcile --json (exit %d): %v\nstdout:\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
		}
		return r, rep
	}
	r, rep := reconcile()
	wantOneLineError(t, r, exitCheckFailed, `3 event(s) published more than 0s ago were not applied by consumer "shop"`, "--replay-missing")
	if rep.Published != 101 || rep.Applied != 98 || rep.Missing != 3 || rep.InFlight != 0 || rep.Phantoms != 0 || rep.OK || rep.Schema != o.schema || rep.ConsumerSchema != o.schema {
		t.Fatalf("report: %s", r.stdout)
	}
	if got, want := ids(rep.MissingEvents), idStrings(orders[49].ID, orders[99].ID, poison.ID); !slices.Equal(got, want) {
		t.Errorf("missing\n got %v\nwant %v", got, want)
	}
	for _, m := range rep.MissingEvents {
		switch m.ID {
		case poison.ID:
			if st := m.Transport; st == nil || !st.DeadLettered || st.State != "FAILED" || st.ResponseStatus != 489 || st.DLQID == "" || st.MessageID == "" {
				t.Errorf("the poison event's QStash state: %+v", st)
			}
		default:
			// Delivered: QStash keeps nothing that names the event.
			if m.Transport != nil {
				t.Errorf("dropped event %s has QStash state %+v", m.ID, m.Transport)
			}
		}
	}

	// The table says the same, with QStash's view of each.
	r = runCommand(t, environ, "reconcile", o.args("--consumer", "shop", "--grace", "0s", "--qstash-url", s.api)...)
	if r.code != exitCheckFailed {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !reportLine(r.stdout, "missing:", "3") || !reportLine(r.stdout, "applied:", "98") {
		t.Errorf("the report's counts:\n%s", r.stdout)
	}
	for _, want := range []string{poison.ID.String(), "FAILED (in DLQ, 489)", orders[49].ID.String(), "delivered?",
		"QStash: 1 in its DLQ, 0 still on their way, 2 neither"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the report lacks %q:\n%s", want, r.stdout)
		}
	}

	// Within the default grace of 10 minutes they are still in flight.
	r = runCommand(t, environ, "reconcile", o.args("--consumer", "shop", "--json")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"in_flight": 3`) {
		t.Errorf("with the default grace: %s", r.stdout)
	}

	// A record the outbox has no event for.
	phantom := core.NewID()
	o.exec(t, `INSERT INTO "`+o.schema+`".outbox_events_processed (consumer, event_id) VALUES ('shop', $1)`, phantom.String())
	r, rep = reconcile()
	if r.code != exitCheckFailed || rep.Phantoms != 1 || len(rep.PhantomRecords) != 1 || rep.PhantomRecords[0].EventID != phantom ||
		!strings.Contains(r.stderr, `1 record(s) of consumer "shop" belong to no event of the outbox`) {
		t.Errorf("phantom: exit %d, stderr %q, report %s", r.code, r.stderr, r.stdout)
	}

	// --replay-missing puts exactly the missing events back, IDs kept.
	r, rep = reconcile("--replay-missing")
	if r.code != exitCheckFailed || rep.Replayed == nil || *rep.Replayed != 3 || !strings.Contains(r.stderr, "replayed 3 of the 3 missing event(s)") {
		t.Fatalf("replay-missing: exit %d, replayed %v\nstderr:\n%s", r.code, rep.Replayed, r.stderr)
	}
	for _, e := range append(orders, poison) {
		pending, attempts := o.state(t, e.ID)
		want := dropped[e.ID] || e.ID == poison.ID
		if pending != want || pending && attempts != 0 {
			t.Errorf("event %s (%s): pending %v attempts %d, want pending %v", e.ID, e.Type, pending, attempts, want)
		}
	}
	if n := o.count(t, "true"); n != 101 {
		t.Errorf("%d rows after the replay, want 101", n)
	}
	// Replayed, they are pending again: nothing is missing, the phantom
	// is still there; without it the consumer is clean.
	_, rep = reconcile()
	if rep.Missing != 0 || rep.Pending != 3 || rep.Phantoms != 1 {
		t.Errorf("after the replay: %+v", rep.ReconcileReport)
	}
	o.exec(t, `DELETE FROM "`+o.schema+`".outbox_events_processed WHERE event_id = $1`, phantom.String())
	r = runCommand(t, environ, "reconcile", o.args("--consumer", "shop", "--grace", "0s")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "nothing missing") {
		t.Errorf("clean: %s", r.stdout)
	}
}

func TestReconcileFlags(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--consumer is required"},
		{[]string{"--consumer", "x", "--since", "yesterday"}, `--since "yesterday" is neither an RFC 3339 time`},
		{[]string{"--consumer", "x", "--since", "1h", "--until", "2h"}, "--until must be after --since"},
		{[]string{"--consumer", "x", "--limit", "-1"}, "--limit must be 0 (all) or positive"},
		{[]string{"--consumer", "x", "--consumer-database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2"}, "consumer database (--consumer-database-url): cannot reach PostgreSQL"},
		{[]string{"--consumer", "x", "--consumer-schema", "nowhere"}, "the consumer's records (--consumer-schema, --consumer-table): the outbox tables are missing or out of date in schema \"nowhere\""},
	} {
		r := runCommand(t, env(), "reconcile", o.args(c.args...)...)
		wantOneLineError(t, r, exitError, c.want)
	}
	for s, want := range map[string]time.Duration{"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour} {
		now := time.Now()
		got, err := pointInTime("since", s, now)
		if err != nil || now.Sub(got) != want {
			t.Errorf("pointInTime(%q) = %v, %v", s, now.Sub(got), err)
		}
	}
}

// TestQStashLogFindsMessagesStillRetrying: a message QStash still
// retries is found through its logs and the message itself.
func TestQStashLogFindsMessagesStillRetrying(t *testing.T) {
	t.Parallel()
	// Real backoff: the first retry waits about 12 s, long past the test.
	dev, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(dev.Handler())
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("down for maintenance"))
	}))
	t.Cleanup(func() {
		api.Close()
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		failing.Close()
	})
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{BaseURL: api.URL, Token: qstashdev.DefaultToken, Destination: qstash.Target{URL: failing.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	e := event(t, "order.placed", "", "")
	other := core.NewID()
	if err := pub.Publish(ctxT(t), []core.Event{e}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the first attempt to fail", func() bool {
		for _, ev := range dev.Events() {
			if ev.State == qstashdev.StateRetry {
				return true
			}
		}
		return false
	})
	log := newQStashLog(api.URL, qstashdev.DefaultToken, time.Now().Add(-time.Hour), api.Client())
	got, err := log.Lookup(ctxT(t), []core.ID{e.ID, other})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := got[e.ID]
	if !ok || len(got) != 1 || st.State != "RETRY" || st.DeadLettered || st.MessageID == "" || st.NextDelivery.IsZero() || !strings.Contains(st.Error, "503") {
		t.Errorf("lookup: %+v", got)
	}
	// A wrong token says so.
	_, err = newQStashLog(api.URL, "wrong", time.Time{}, api.Client()).Lookup(ctxT(t), []core.ID{e.ID})
	if err == nil || !strings.Contains(err.Error(), "the token is wrong") {
		t.Errorf("wrong token: %v", err)
	}
}
