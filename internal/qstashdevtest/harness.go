package qstashdevtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// WaitTimeout bounds every wait on a condition; a failing test fails at the
// deadline instead of hanging.
const WaitTimeout = 10 * time.Second

// Harness is a running qstashdev behind an httptest server.
type Harness struct {
	T      testing.TB
	Server *qstashdev.Server
	// API serves Server's handler; nil when a test serves it some other way.
	API *httptest.Server
}

// NewHarness starts a qstashdev server with cfg and serves its API; both
// are closed when the test ends.
func NewHarness(t testing.TB, cfg qstashdev.Config) *Harness {
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
	return &Harness{T: t, Server: srv, API: ts}
}

// Do calls the API with the default token unless header sets another
// Authorization.
func (h *Harness) Do(method, path string, header http.Header, body string) (int, http.Header, []byte) {
	h.T.Helper()
	req, err := http.NewRequest(method, h.API.URL+path, strings.NewReader(body))
	if err != nil {
		h.T.Fatalf("NewRequest %s %s: %v", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if _, ok := header["Authorization"]; !ok {
		req.Header.Set("Authorization", "Bearer "+qstashdev.DefaultToken)
	}
	resp, err := h.API.Client().Do(req)
	if err != nil {
		h.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.T.Fatalf("read %s %s: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// Publish posts body to /v2/publish/<dest> and returns the message id,
// failing the test on anything but 200.
func (h *Harness) Publish(dest string, header http.Header, body string) string {
	h.T.Helper()
	status, _, b := h.Do(http.MethodPost, "/v2/publish/"+dest, header, body)
	if status != http.StatusOK {
		h.T.Fatalf("publish to %s: status %d: %s", dest, status, b)
	}
	var res struct {
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		h.T.Fatalf("publish to %s: decode %s: %v", dest, b, err)
	}
	if !strings.HasPrefix(res.MessageID, "msg_") {
		h.T.Fatalf("publish to %s: messageId %q", dest, res.MessageID)
	}
	return res.MessageID
}

// WaitFor waits until cond holds, failing the test at the deadline.
func (h *Harness) WaitFor(what string, cond func() bool) {
	h.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := h.Server.WaitFor(ctx, cond); err != nil {
		h.T.Fatalf("waiting for %s: %v", what, err)
	}
}

// WaitIdle waits until every message is delivered, failed or cancelled.
func (h *Harness) WaitIdle() {
	h.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := h.Server.WaitIdle(ctx); err != nil {
		h.T.Fatalf("WaitIdle: %v (pending: %+v)", err, h.Server.Messages())
	}
}

// States returns the states message id went through, in order.
func (h *Harness) States(id string) []string {
	var out []string
	for _, e := range h.Server.MessageEvents(id) {
		out = append(out, e.State)
	}
	return out
}
