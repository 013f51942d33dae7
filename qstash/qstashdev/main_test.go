package qstashdev_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait on a condition; a failing test fails at the
// deadline instead of hanging.
const waitTimeout = 10 * time.Second

// harness is a running qstashdev behind an httptest server.
type harness struct {
	t   *testing.T
	srv *qstashdev.Server
	ts  *httptest.Server
}

func newHarness(t *testing.T, cfg qstashdev.Config) *harness {
	t.Helper()
	srv, err := qstashdev.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		ts.Close()
	})
	return &harness{t: t, srv: srv, ts: ts}
}

// do calls the API with the default token unless headers set another
// Authorization.
func (h *harness) do(method, path string, header http.Header, body string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatalf("NewRequest %s %s: %v", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if _, ok := header["Authorization"]; !ok {
		req.Header.Set("Authorization", "Bearer "+qstashdev.DefaultToken)
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("read %s %s: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// publish posts body to /v2/publish/<dest> and returns the message id,
// failing the test on anything but 200.
func (h *harness) publish(dest string, header http.Header, body string) string {
	h.t.Helper()
	status, _, b := h.do(http.MethodPost, "/v2/publish/"+dest, header, body)
	if status != http.StatusOK {
		h.t.Fatalf("publish to %s: status %d: %s", dest, status, b)
	}
	var res struct {
		MessageID string `json:"messageId"`
	}
	mustJSON(h.t, b, &res)
	if !strings.HasPrefix(res.MessageID, "msg_") {
		h.t.Fatalf("publish to %s: messageId %q", dest, res.MessageID)
	}
	return res.MessageID
}

// waitFor waits until cond holds, failing the test at the deadline.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.srv.WaitFor(ctx, cond); err != nil {
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (h *harness) waitIdle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.srv.WaitIdle(ctx); err != nil {
		h.t.Fatalf("WaitIdle: %v (pending: %+v)", err, h.srv.Messages())
	}
}

// states returns the states a message went through, in order.
func (h *harness) states(id string) []string {
	var out []string
	for _, e := range h.srv.MessageEvents(id) {
		out = append(out, e.State)
	}
	return out
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// delivery is one request a sink received.
type delivery struct {
	Method string
	Path   string // path and query as received
	Header http.Header
	Body   []byte
}

// sink is a destination that records deliveries and answers with respond
// (200 when nil). n is the 0-based index of the delivery.
type sink struct {
	ts      *httptest.Server
	respond func(w http.ResponseWriter, r *http.Request, n int)
	mu      sync.Mutex
	got     []delivery
}

func newSink(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, n int)) *sink {
	t.Helper()
	s := &sink{respond: respond}
	s.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.got)
		s.got = append(s.got, delivery{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		if s.respond != nil {
			s.respond(w, r, n)
		}
	}))
	t.Cleanup(s.ts.Close)
	return s
}

func (s *sink) url(path string) string { return s.ts.URL + path }

func (s *sink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.got...)
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// fakeClock is coretest.FakeClock started at a whole second, so event
// times in milliseconds compare exactly.
type fakeClock struct{ *coretest.FakeClock }

func newFakeClock() fakeClock {
	return fakeClock{coretest.NewFakeClock(time.Now().Truncate(time.Second))}
}

// waitTimer blocks until a timer is armed for exactly when: the server's
// scheduler keeps at most one, and advancing before it is armed would race.
func (c fakeClock) waitTimer(t *testing.T, when time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.WaitForDeadline(ctx, when); err != nil {
		t.Fatalf("no timer armed for %v (now %v)", when, c.Now())
	}
}

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// newTestAPI serves srv's API without closing srv at cleanup (the test
// does).
func newTestAPI(t *testing.T, srv *qstashdev.Server) *httptest.Server {
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func jwtParse(sig, key string) (*jwt.Token, error) {
	return jwt.Parse(sig, func(*jwt.Token) (any, error) { return []byte(key), nil }, jwt.WithValidMethods([]string{"HS256"}))
}
