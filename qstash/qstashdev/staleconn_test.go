package qstashdev_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// restartable is a consumer that can be stopped and started again on the
// same address, the way a developer restarts a service between deliveries:
// every connection qstashdev pooled to it goes stale at once.
type restartable struct {
	t    *testing.T
	addr string

	mu      sync.Mutex
	hs      *http.Server
	served  chan struct{}
	got     []qstashdevtest.Delivery
	barrier int           // while > 0, handlers wait until this many are in flight
	arrived int           // handlers waiting at the barrier
	release chan struct{} // closed when barrier handlers are in flight together
}

func newRestartable(t *testing.T) *restartable {
	t.Helper()
	c := &restartable{t: t}
	ln := listenLocal(t)
	c.addr = ln.Addr().String()
	c.serve(ln)
	t.Cleanup(c.stop)
	return c
}

func (c *restartable) URL(path string) string { return "http://" + c.addr + path }

func (c *restartable) serve(ln net.Listener) {
	hs := &http.Server{Handler: http.HandlerFunc(c.handle)}
	served := make(chan struct{})
	c.mu.Lock()
	c.hs, c.served = hs, served
	c.mu.Unlock()
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
}

// stop closes the listener and every connection, idle ones included.
func (c *restartable) stop() {
	c.mu.Lock()
	hs, served := c.hs, c.served
	c.hs = nil
	c.mu.Unlock()
	if hs == nil {
		return
	}
	_ = hs.Close()
	<-served
}

// restart stops the consumer and listens again on the same address.
func (c *restartable) restart() {
	c.t.Helper()
	c.stop()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.t.Fatalf("listen again on %s: %v", c.addr, err)
	}
	c.serve(ln)
}

// holdUntil makes the next n requests wait for each other, so they are in
// flight together on n connections, which then all go back to the pool.
func (c *restartable) holdUntil(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.barrier, c.arrived, c.release = n, 0, make(chan struct{})
}

func (c *restartable) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.got = append(c.got, qstashdevtest.Delivery{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
	var release chan struct{}
	if c.barrier > 0 {
		release = c.release
		c.arrived++
		if c.arrived == c.barrier {
			c.barrier = 0
			close(release)
		}
	}
	c.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-time.After(qstashdevtest.WaitTimeout):
			w.WriteHeader(http.StatusServiceUnavailable) // the test fails on the missing deliveries
			return
		}
	}
}

func (c *restartable) Deliveries() []qstashdevtest.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]qstashdevtest.Delivery(nil), c.got...)
}

// settled counts DELIVERED, RETRY and FAILED events among ids: each attempt
// outcome a test can wait for without moving the clock.
func settled(h *qstashdevtest.Harness, ids map[string]bool) (delivered, failed int) {
	for _, e := range h.Server.Events() {
		if !ids[e.MessageID] {
			continue
		}
		switch e.State {
		case qstashdev.StateDelivered:
			delivered++
		case qstashdev.StateRetry, qstashdev.StateFailed:
			failed++
		}
	}
	return delivered, failed
}

// warmPool delivers n messages at once so that n connections to c sit in
// qstashdev's idle pool; restarting c then leaves all n dead.
func warmPool(t *testing.T, h *qstashdevtest.Harness, c *restartable, n int) {
	t.Helper()
	c.holdUntil(n)
	ids := map[string]bool{}
	for i := range n {
		ids[h.Publish(c.URL("/warm"), nil, "warm-"+strconv.Itoa(i))] = true
	}
	h.WaitFor("warm-up deliveries", func() bool { d, f := settled(h, ids); return d+f == n })
	if d, _ := settled(h, ids); d != n {
		t.Fatalf("warm-up: %d of %d delivered", d, n)
	}
}

// A consumer restart leaves every pooled connection to it dead. The next
// delivery must still reach the new process on its first attempt: a stale
// connection is retried at once on a fresh one and is never charged as a
// failed attempt (with the fake clock, a charged failure would show up as
// a RETRY event rather than a late delivery).
func TestStaleConnectionAfterConsumerRestart(t *testing.T) {
	t.Parallel()
	const pooled = 4
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock, Concurrency: pooled})
	c := newRestartable(t)
	warmPool(t, h, c, pooled)
	c.restart()
	before := len(c.Deliveries())

	id := h.Publish(c.URL("/after-restart"), nil, "after")
	ids := map[string]bool{id: true}
	h.WaitFor("the delivery after the restart", func() bool { d, f := settled(h, ids); return d+f > 0 })
	for _, e := range h.Server.MessageEvents(id) {
		if e.State == qstashdev.StateError || e.State == qstashdev.StateRetry {
			t.Fatalf("delivery after the restart was charged a failed attempt: %s %q", e.State, e.Error)
		}
	}
	got := c.Deliveries()[before:]
	if len(got) != 1 || got[0].Path != "/after-restart" || got[0].Header.Get("Upstash-Retried") != "0" {
		t.Fatalf("restarted consumer got %+v, want one first attempt (Upstash-Retried: 0)", got)
	}
}

// A burst queued for a consumer that restarts meets a pool full of dead
// connections on every worker at once; none of the messages may be charged
// for it.
func TestStaleConnectionsBurstAfterConsumerRestart(t *testing.T) {
	t.Parallel()
	const (
		workers = 8
		burst   = 200
		delay   = 10 * time.Second
	)
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock, Concurrency: workers})
	c := newRestartable(t)
	warmPool(t, h, c, workers)

	// Queued while the old process still runs, due after it restarted.
	due := clock.Now().Add(delay)
	ids := map[string]bool{}
	for i := range burst {
		ids[h.Publish(c.URL("/burst"), hdr("Upstash-Delay", "10s"), "b-"+strconv.Itoa(i))] = true
	}
	c.restart()
	before := len(c.Deliveries())
	clock.WaitTimer(t, due)
	clock.Advance(delay)

	h.WaitFor("the burst", func() bool { d, f := settled(h, ids); return d+f == burst })
	if d, f := settled(h, ids); d != burst {
		for _, e := range h.Server.Events() {
			if ids[e.MessageID] && e.State == qstashdev.StateError {
				t.Logf("charged: %s %q", e.MessageID, e.Error)
				break
			}
		}
		t.Fatalf("%d of %d delivered on the first attempt, %d charged a failed attempt", d, burst, f)
	}
	for _, d := range c.Deliveries()[before:] {
		if d.Header.Get("Upstash-Retried") != "0" {
			t.Fatalf("delivery with Upstash-Retried %q", d.Header.Get("Upstash-Retried"))
		}
	}
}

// A peer that reads a whole request on a reused connection and hangs up
// without a response byte (a keep-alive timeout racing the request, or a
// process exiting) cannot have answered it. Both delivery paths retry such
// a request once on a fresh connection: delivery is at-least-once, so a
// possible duplicate is within the contract, while a charged attempt costs
// the message a 12 s backoff. The net/http path is exercised through
// Config.Client.
func TestPeerClosesReusedConnectionWithoutAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func() *http.Client
	}{
		{"fast path", func() *http.Client { return nil }},
		{"net/http", func() *http.Client {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			t.Cleanup(tr.CloseIdleConnections)
			return &http.Client{Transport: tr}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := qstashdevtest.NewFakeClock()
			h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock, Concurrency: 1, Client: tc.client()})
			ln := listenLocal(t)
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				conns    []net.Conn
				answered []string // Upstash-Retried of each answered request
			)
			t.Cleanup(func() {
				ln.Close()
				mu.Lock()
				for _, nc := range conns {
					nc.Close() // qstashdev may still pool it
				}
				mu.Unlock()
				wg.Wait()
			})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					nc, err := ln.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					conns = append(conns, nc)
					mu.Unlock()
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer nc.Close()
						br := bufio.NewReader(nc)
						// Answer the first request on each connection; read
						// the second in full and hang up without a byte.
						for n := 0; ; n++ {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							_, _ = io.Copy(io.Discard, req.Body)
							if n > 0 {
								return
							}
							mu.Lock()
							answered = append(answered, req.Header.Get("Upstash-Retried"))
							mu.Unlock()
							if _, err := io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
								return
							}
						}
					}()
				}
			}()
			dest := "http://" + ln.Addr().String() + "/hook"
			var ids []string
			for i := range 2 {
				id := h.Publish(dest, nil, "m"+strconv.Itoa(i))
				ids = append(ids, id)
				one := map[string]bool{id: true}
				h.WaitFor("an outcome", func() bool { d, f := settled(h, one); return d+f > 0 })
				for _, e := range h.Server.MessageEvents(id) {
					if e.State == qstashdev.StateError {
						t.Fatalf("message %d charged a failed attempt: %q", i, e.Error)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(answered) != 2 || answered[0] != "0" || answered[1] != "0" {
				t.Fatalf("answered attempts %v, want two first attempts", answered)
			}
		})
	}
}
