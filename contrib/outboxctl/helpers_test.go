package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// result is a finished outboxctl process.
type result struct {
	code           int
	stdout, stderr string
}

// ownedEnv are the variables outboxctl reads: the tests set them
// explicitly, so a developer's shell cannot change what a test sees.
var ownedEnv = []string{"DATABASE_URL", "OUTBOX_SCHEMA", "OUTBOX_TABLE", "QSTASH_URL", "QSTASH_TOKEN", "NATS_URL", "AMQP_URL", "GORACE",
	"OUTBOX_SCHEMAS", "OUTBOX_WAKEUP", "OUTBOX_WAKEUP_URL", "OUTBOX_HTTP_ADDR", "OUTBOXCTL_CONFIG",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_METRIC_EXPORT_INTERVAL"}

// env returns the process environment without outboxctl's variables, plus
// DATABASE_URL for the test server and extra ("KEY=value").
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		owned := false
		for _, o := range ownedEnv {
			owned = owned || k == o
		}
		if !owned {
			out = append(out, kv)
		}
	}
	// A race-enabled binary sleeps a second at exit by default (so
	// reports from exiting goroutines get out); dozens of processes make
	// that the test's run time. exitcode keeps a race a failure.
	out = append(out, "DATABASE_URL="+pgtest.URL(), "GORACE=atexit_sleep_ms=0 exitcode=66 "+os.Getenv("GORACE"),
		// Relays run in parallel: each serves its endpoints on a port of
		// its own (the log line "serving /metrics..." gives it).
		"OUTBOX_HTTP_ADDR=127.0.0.1:0")
	return append(out, extra...)
}

// cli runs outboxctl to completion.
func cli(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	p := start(t, environ, args...)
	code := p.wait(t, 60*time.Second)
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

// syncBuffer is a bytes.Buffer the process's output goroutines and the test
// can use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// proc is a running outboxctl process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	code           int
}

// start runs outboxctl in the background; the process is killed when the
// test ends if it is still running.
func start(t *testing.T, environ []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start outboxctl: %v", err)
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			p.code = 0
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		default:
			p.code = -1
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("outboxctl %s did not exit within %s\nstdout:\n%s\nstderr:\n%s", strings.Join(p.cmd.Args[1:], " "), timeout, p.stdout, p.stderr)
		return -1
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor polls cond until it holds, failing the test at the deadline.
// Polling a condition, never sleeping a fixed time, is how these tests wait.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// wantOK fails the test unless r exited 0.
func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// wantOneLineError checks the promise of every failure: a non-zero exit
// code (want), and stderr holding exactly one line, "outboxctl: ...", that
// contains each of contains, with no trace of a panic.
func wantOneLineError(t *testing.T, r result, want int, contains ...string) {
	t.Helper()
	if r.code != want {
		t.Errorf("exit code %d, want %d (stderr: %q)", r.code, want, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "outboxctl: ") {
		t.Fatalf("stderr is not one line starting with \"outboxctl: \":\n%s", r.stderr)
	}
	for _, c := range contains {
		if !strings.Contains(lines[0], c) {
			t.Errorf("error %q does not contain %q", lines[0], c)
		}
	}
	for _, bad := range []string{"goroutine ", "panic", ".go:"} {
		if strings.Contains(r.stderr, bad) {
			t.Errorf("error output contains %q: %s", bad, r.stderr)
		}
	}
}

// outbox is a migrated outbox in a schema of its own.
type outbox struct {
	pool   *pgxpool.Pool
	schema string
	store  *postgres.Store
}

func newOutbox(t *testing.T) outbox {
	t.Helper()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "outboxctl")
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return outbox{pool: pool, schema: schema, store: store}
}

// args appends the outbox's --schema to a command line.
func (o outbox) args(args ...string) []string { return append(args, "--schema", o.schema) }

// table is the outbox table's qualified name, for plain SQL.
func (o outbox) table() string { return `"` + o.schema + `".outbox_events` }

func (o outbox) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := o.pool.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (o outbox) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := o.pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+o.table()+" WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", where, err)
	}
	return n
}

// insertSQL writes n events with plain SQL, as a service in another
// language would: only id, event_type and payload.
func (o outbox) insertSQL(t *testing.T, n int, typ string) []core.ID {
	t.Helper()
	ids := make([]core.ID, n)
	for i := range ids {
		ids[i] = core.NewID()
		o.exec(t, "INSERT INTO "+o.table()+" (id, event_type, payload) VALUES ($1, $2, $3)",
			ids[i].String(), typ, fmt.Sprintf(`{"n":%d}`, i))
	}
	return ids
}

// add writes events through the store.
func (o outbox) add(t *testing.T, events ...core.Event) {
	t.Helper()
	if err := o.store.Add(ctxT(t), o.pool, events...); err != nil {
		t.Fatalf("add: %v", err)
	}
}

// settle claims every due event and settles each as kind says; retries
// are due again in an hour.
func (o outbox) settle(t *testing.T, kind func(core.Event) core.OutcomeKind, lastError string) {
	t.Helper()
	b, err := o.store.Claim(ctxT(t), core.ClaimRequest{Limit: 1000, LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	outs := make([]core.Outcome, len(b.Events))
	for i, e := range b.Events {
		outs[i] = core.Outcome{ID: e.ID, Kind: kind(e)}
		if outs[i].Kind != core.Published {
			outs[i].Error = lastError
		}
		if outs[i].Kind == core.Retry {
			outs[i].Delay = time.Hour // not due again during the test
		}
	}
	if err := o.store.Settle(ctxT(t), core.SettleRequest{Lease: b.Lease, Outcomes: outs}); err != nil {
		t.Fatalf("settle: %v", err)
	}
}

func event(t *testing.T, typ string, aggType, aggID string) core.Event {
	t.Helper()
	e, err := core.NewEvent(typ, map[string]string{"type": typ})
	if err != nil {
		t.Fatal(err)
	}
	e.AggregateType, e.AggregateID = aggType, aggID
	return e
}

// ctxT is a context bounded so a hung statement fails the test, not the run.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// devQStash is an in-process qstashdev, with an optional front handler
// that sees every API request first, and a consumer endpoint that verifies
// deliveries with a qstash.Receiver and counts them by event ID.
type devQStash struct {
	dev *qstashdev.Server
	// url is the API's address, for --qstash-url.
	url string
	// consumer is the consumer endpoint, for --destination.
	consumer string

	mu        sync.Mutex
	delivered map[core.ID]int
	events    map[core.ID]core.Event
}

func newDevQStash(t *testing.T, front func(api http.Handler) http.Handler) *devQStash {
	t.Helper()
	dev, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	var api http.Handler = dev.Handler()
	if front != nil {
		api = front(api)
	}
	apiSrv := httptest.NewServer(api)
	q := &devQStash{dev: dev, url: apiSrv.URL, delivered: map[core.ID]int{}, events: map[core.ID]core.Event{}}

	var recv atomic.Pointer[qstash.Receiver]
	consumerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recv.Load().ServeHTTP(w, r)
	}))
	q.consumer = consumerSrv.URL + "/events"
	keys := dev.Keys()
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: keys.Current, NextSigningKey: keys.Next, URL: q.consumer,
		Handler: core.HandlerFunc(func(ctx context.Context, e core.Event) error {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.delivered[e.ID]++
			q.events[e.ID] = e
			return nil
		}),
		// The deduper is not under test here: count every delivery the
		// transport makes, duplicates included.
		Deduper:  memory.NewDeduper(),
		Consumer: "outboxctl-test",
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
	return q
}

// got returns how many times each event reached the consumer.
func (q *devQStash) got() map[core.ID]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := make(map[core.ID]int, len(q.delivered))
	for k, v := range q.delivered {
		m[k] = v
	}
	return m
}

// relayArgs are the flags of a relay to q's consumer, fast enough for tests.
func (q *devQStash) relayArgs(o outbox, extra ...string) []string {
	args := o.args("relay", "--qstash-url", q.url, "--destination", q.consumer,
		"--poll-interval", "50ms", "--log-format", "json")
	return append(args, extra...)
}

// qstashEnv sets the token through the environment, as deployments do.
func qstashEnv() []string { return env("QSTASH_TOKEN=" + qstashdev.DefaultToken) }
