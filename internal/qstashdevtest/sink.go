package qstashdevtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Delivery is one request a Sink received.
type Delivery struct {
	Method string
	Path   string // path and query as received
	Header http.Header
	Body   []byte
}

// Sink is a destination that records deliveries.
type Sink struct {
	ts      *httptest.Server
	respond func(w http.ResponseWriter, r *http.Request, n int)
	mu      sync.Mutex
	got     []Delivery
}

// NewSink starts a destination that answers with respond (200 when nil);
// n is the 0-based index of the delivery. It is closed when the test ends.
func NewSink(t testing.TB, respond func(w http.ResponseWriter, r *http.Request, n int)) *Sink {
	t.Helper()
	s := &Sink{respond: respond}
	s.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.got)
		s.got = append(s.got, Delivery{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		if s.respond != nil {
			s.respond(w, r, n)
		}
	}))
	t.Cleanup(s.ts.Close)
	return s
}

// URL returns the absolute URL of path on the sink.
func (s *Sink) URL(path string) string { return s.ts.URL + path }

// Deliveries returns what the sink received so far, in order.
func (s *Sink) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.got...)
}

// Count returns the number of deliveries so far.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}
