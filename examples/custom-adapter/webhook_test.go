package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
)

func TestMain(m *testing.M) {
	// Idle keep-alive connections of the publisher's HTTP client close
	// lazily; they are not ours to wait for.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// TestConformance is step 2 of the README: the Publisher suite every
// transport runs. The harness is a test endpoint that decodes what it
// receives the way a consumer would.
func TestConformance(t *testing.T) {
	coretest.TestPublisher(t, coretest.PublisherHarness{
		New: func(t *testing.T) (core.Publisher, func() []core.Event) {
			rec := &recorder{}
			srv := httptest.NewServer(rec)
			t.Cleanup(srv.Close)
			pub, err := NewWebhookPublisher(WebhookConfig{URL: srv.URL + "/events"})
			if err != nil {
				t.Fatal(err)
			}
			return pub, rec.events
		},
	})
}

// recorder is a webhook endpoint that records the events it receives.
type recorder struct {
	mu  sync.Mutex
	got []core.Event
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	e, err := core.EventFromCloudEventHeaders(flatHeaders(req.Header), readBody(req))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Header.Get("Idempotency-Key") != e.ID.String() {
		http.Error(w, "Idempotency-Key is not the event ID", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
}

func (r *recorder) events() []core.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]core.Event(nil), r.got...)
}

// TestOutcomePerStatus checks the classification the relay relies on: one
// batch, one status per event, each outcome reported at its own index.
func TestOutcomePerStatus(t *testing.T) {
	later := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		status     int
		retryAfter string
		permanent  bool
		hint       time.Duration // minimum expected RetryAfter hint; 0 for none
	}{
		{status: 200},
		{status: 204},
		{status: 400, permanent: true},
		{status: 404, permanent: true},
		{status: 422, permanent: true},
		{status: 408},
		{status: 429, retryAfter: "7", hint: 7 * time.Second},
		{status: 429},
		{status: 500},
		{status: 503, retryAfter: later, hint: 80 * time.Second},
		{status: 302},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := indexOf(r.Header.Get("Ce-Type"))
		if ra := cases[i].retryAfter; ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		if cases[i].status == 302 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(cases[i].status)
		_, _ = w.Write([]byte("details"))
	}))
	defer srv.Close()
	pub, err := NewWebhookPublisher(WebhookConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	events := make([]core.Event, len(cases))
	for i := range cases {
		e, err := core.NewEvent("case."+string(rune('a'+i)), map[string]int{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		events[i] = e
	}
	errs := core.EventErrors(len(events), pub.Publish(context.Background(), events))
	for i, c := range cases {
		err := errs[i]
		if c.status < 300 {
			if err != nil {
				t.Errorf("%d: %v, want published", c.status, err)
			}
			continue
		}
		var se *StatusError
		if !errors.As(err, &se) || se.StatusCode != c.status || se.Body != "details" {
			t.Errorf("%d: error %v, want a *StatusError with the status and body", c.status, err)
			continue
		}
		if core.IsPermanent(err) != c.permanent {
			t.Errorf("%d: permanent = %v, want %v", c.status, core.IsPermanent(err), c.permanent)
		}
		hint, ok := core.RetryAfterHint(err)
		if ok != (c.hint > 0) || hint < c.hint {
			t.Errorf("%d (Retry-After %q): hint %v, %v; want at least %v", c.status, c.retryAfter, hint, ok, c.hint)
		}
	}
}

func indexOf(typ string) int { return int(typ[len("case.")] - 'a') }

// TestHonoursContext: the relay cancels a publish at its PublishTimeout so
// a lease never expires mid-publish. A hung endpoint must not hold Publish
// past ctx, and the events must fail transiently (to be retried).
func TestHonoursContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	pub, err := NewWebhookPublisher(WebhookConfig{URL: srv.URL, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	events := make([]core.Event, 6) // more than Concurrency: some never start
	for i := range events {
		events[i], _ = core.NewEvent("slow", map[string]int{"i": i})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = pub.Publish(ctx, events)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Publish took %s after its context ended", took)
	}
	for i, err := range core.EventErrors(len(events), err) {
		if err == nil || core.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("event %d: %v, want a transient error wrapping context.DeadlineExceeded", i, err)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []WebhookConfig{{}, {URL: "hooks.example.com"}, {URL: "ftp://x"}, {URL: "https://x", Concurrency: -1}} {
		if _, err := NewWebhookPublisher(cfg); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("NewWebhookPublisher(%+v) = %v, want a config error", cfg, err)
		}
	}
}

// TestDestinationOverride: an event whose Destination is a URL goes there.
func TestDestinationOverride(t *testing.T) {
	def, other := &recorder{}, &recorder{}
	defSrv, otherSrv := httptest.NewServer(def), httptest.NewServer(other)
	defer defSrv.Close()
	defer otherSrv.Close()
	pub, err := NewWebhookPublisher(WebhookConfig{URL: defSrv.URL, Header: http.Header{"Authorization": {"Bearer t"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := core.NewEvent("a", struct{}{})
	b, _ := core.NewEvent("b", struct{}{})
	b.Destination = otherSrv.URL + "/special"
	if err := pub.Publish(context.Background(), []core.Event{a, b}); err != nil {
		t.Fatal(err)
	}
	if got := def.events(); len(got) != 1 || got[0].ID != a.ID {
		t.Errorf("default endpoint got %v", got)
	}
	if got := other.events(); len(got) != 1 || got[0].ID != b.ID {
		t.Errorf("override endpoint got %v", got)
	}
}

// TestExampleRuns runs the program as `go run ./examples/custom-adapter`
// does, against its local endpoint.
func TestExampleRuns(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), "", 20, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"events written: 20", "delivered: 19", "dead-lettered: 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestExampleReportsWhatHappened: pointed at an endpoint that is not
// there, the program used to report its dead letters as "refused by the
// endpoint with a 4xx". It reports each dead letter's real reason.
func TestExampleReportsWhatHappened(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/hooks"
	ln.Close() // nothing listens there now: connection refused

	var out bytes.Buffer
	if err := run(context.Background(), closed, 3, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"events written: 3", "delivered: 0", "dead-lettered: 3", "3 × webhook: cannot reach the endpoint", "connection refused", "after 5 attempts"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "4xx") {
		t.Errorf("an unreachable endpoint is reported as a 4xx:\n%s", got)
	}
}
