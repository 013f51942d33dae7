package chaos_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// proxy is the transport the relays publish to: qstashdev's API behind a
// listener the test can switch off (connection refused) or into a storm of
// 503s, some of them sent after qstashdev accepted the request (a lost
// answer). It counts, per event ID, the publishes qstashdev accepted.
type proxy struct {
	next http.Handler
	srv  *http.Server
	addr string
	wg   sync.WaitGroup

	mu        sync.Mutex
	ln        net.Listener
	storm     bool
	lostEvery int // in a storm, every n-th request is forwarded, then answered 502 ...
	lostMax   int // ... up to this many per storm
	stormN    int
	stormLost int
	accepted  map[core.ID]int
	refusals  int // outages
	answered5 int // 503s answered without forwarding
	lost      int // answers lost after qstashdev accepted
}

func newProxy(t *testing.T, next http.Handler) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{next: next, addr: ln.Addr().String(), accepted: make(map[core.ID]int)}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.serve(ln)
	t.Cleanup(func() {
		_ = p.srv.Close()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) url() string { return "http://" + p.addr }

func (p *proxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln)
	}()
}

// refuse closes the listener: new connections are refused. Requests on
// connections already open finish normally and their connections close
// (keep-alives off), so no answer is lost by switching.
func (p *proxy) refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return
	}
	p.refusals++
	p.srv.SetKeepAlivesEnabled(false)
	_ = p.ln.Close()
	p.ln = nil
}

// up listens again on the same address and ends a storm.
func (p *proxy) up(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.storm = false
	if p.ln != nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.srv.SetKeepAlivesEnabled(true)
			p.serve(ln)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
		}
		// The port may linger briefly; this is a retry of a bind, not a
		// wait for other work.
		time.Sleep(20 * time.Millisecond)
	}
}

// startStorm answers 503 to every request; with lostEvery > 0, every n-th
// request (up to lostMax in this storm) reaches qstashdev and its answer is
// replaced by a 502. Each lost answer makes a relay publish its batch again,
// like a crash, so they are capped to keep the redelivery bound tight.
func (p *proxy) startStorm(lostEvery, lostMax int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.storm, p.lostEvery, p.lostMax, p.stormN, p.stormLost = true, lostEvery, lostMax, 0, 0
}

type proxyStats struct {
	refusals, answered5, lost int
	republished               int // accepted publishes beyond the first, summed over events
	distinct                  int
}

func (p *proxy) stats() proxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := proxyStats{refusals: p.refusals, answered5: p.answered5, lost: p.lost, distinct: len(p.accepted)}
	for _, n := range p.accepted {
		s.republished += n - 1
	}
	return s
}

func (p *proxy) acceptedCount(id core.ID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted[id]
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	storm, lose := p.storm, false
	if storm {
		p.stormN++
		lose = p.lostEvery > 0 && p.stormN%p.lostEvery == 0 && p.stormLost < p.lostMax
		if lose {
			p.stormLost++
		} else {
			p.answered5++
		}
	}
	p.mu.Unlock()
	if storm && !lose {
		http.Error(w, `{"error":"chaos: service unavailable"}`, http.StatusServiceUnavailable)
		return
	}

	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ids := publishedIDs(r, body)
	var rec *recorder
	if lose {
		rec = &recorder{header: http.Header{}}
	} else {
		rec = &recorder{header: w.Header(), w: w}
	}
	p.next.ServeHTTP(rec, r)
	if rec.status >= 200 && rec.status < 300 {
		p.mu.Lock()
		for _, id := range ids {
			p.accepted[id]++
		}
		if lose {
			p.lost++
		}
		p.mu.Unlock()
	}
	if lose {
		http.Error(w, `{"error":"chaos: bad gateway"}`, http.StatusBadGateway)
	}
}

// publishedIDs reads the event IDs of a publish or batch request from the
// deduplication ID the publisher sets to the event ID, in either content
// mode.
func publishedIDs(r *http.Request, body []byte) []core.ID {
	const fwd = "Upstash-Deduplication-Id"
	switch {
	case r.URL.Path == "/v2/batch":
		var msgs []struct {
			Headers map[string]string `json:"headers"`
		}
		if json.Unmarshal(body, &msgs) != nil {
			return nil
		}
		ids := make([]core.ID, 0, len(msgs))
		for _, m := range msgs {
			for k, v := range m.Headers {
				if strings.EqualFold(k, fwd) {
					if id, err := core.ParseID(v); err == nil {
						ids = append(ids, id)
					}
				}
			}
		}
		return ids
	case strings.HasPrefix(r.URL.Path, "/v2/publish/"), strings.HasPrefix(r.URL.Path, "/v2/enqueue/"):
		if id, err := core.ParseID(r.Header.Get(fwd)); err == nil {
			return []core.ID{id}
		}
	}
	return nil
}

// recorder passes an answer through (w set) or swallows it, remembering its
// status.
type recorder struct {
	header http.Header
	w      http.ResponseWriter
	status int
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	if r.w != nil {
		r.w.WriteHeader(code)
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.w != nil {
		return r.w.Write(b)
	}
	return len(b), nil
}
