package qstashdev_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

type publishAnswer struct {
	MessageID    string `json:"messageId"`
	Deduplicated bool   `json:"deduplicated"`
}

func TestDeduplicationByID(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	dst := qstashdevtest.NewSink(t, nil)
	pub := func(url, dedupID string) (int, publishAnswer) {
		status, _, b := h.Do(http.MethodPost, "/v2/publish/"+url, hdr("Upstash-Deduplication-Id", dedupID), "body")
		var a publishAnswer
		mustJSON(t, b, &a)
		return status, a
	}
	s1, first := pub(dst.URL("/a"), "ev-1")
	s2, dup := pub(dst.URL("/a"), "ev-1")
	if s1 != http.StatusOK || first.Deduplicated {
		t.Fatalf("first publish: %d %+v", s1, first)
	}
	if s2 != http.StatusAccepted || !dup.Deduplicated || dup.MessageID != first.MessageID {
		t.Fatalf("duplicate: %d %+v, want 202 deduplicated with %s", s2, dup, first.MessageID)
	}
	// The same id for another destination is another message.
	if s, other := pub(dst.URL("/b"), "ev-1"); s != http.StatusOK || other.Deduplicated {
		t.Fatalf("same id, other destination: %d %+v", s, other)
	}
	h.WaitIdle()
	// Still deduplicated after delivery, within the window...
	if s, again := pub(dst.URL("/a"), "ev-1"); s != http.StatusAccepted || again.MessageID != first.MessageID {
		t.Fatalf("after delivery: %d %+v", s, again)
	}
	// ...and not after it.
	clock.Advance(10 * time.Minute)
	if s, later := pub(dst.URL("/a"), "ev-1"); s != http.StatusOK || later.Deduplicated || later.MessageID == first.MessageID {
		t.Fatalf("after the 10-minute window: %d %+v", s, later)
	}
	h.WaitIdle()
	if n := dst.Count(); n != 3 {
		t.Fatalf("deliveries %d, want 3", n)
	}
}

func TestDeduplicationByContent(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	pub := func(body, ct string) (int, publishAnswer) {
		status, _, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/c"),
			hdr("Upstash-Content-Based-Deduplication", "true", "Content-Type", ct, "Upstash-Forward-X-A", "1"), body)
		var a publishAnswer
		mustJSON(t, b, &a)
		return status, a
	}
	_, first := pub("same", "text/plain")
	s, dup := pub("same", "text/plain")
	if s != http.StatusAccepted || !dup.Deduplicated || dup.MessageID != first.MessageID {
		t.Fatalf("same content: %d %+v", s, dup)
	}
	if s, a := pub("other", "text/plain"); s != http.StatusOK || a.Deduplicated {
		t.Fatalf("other body deduplicated: %d %+v", s, a)
	}
	if s, a := pub("same", "application/json"); s != http.StatusOK || a.Deduplicated {
		t.Fatalf("other content type deduplicated: %d %+v", s, a)
	}
	h.WaitIdle()
	if n := dst.Count(); n != 3 {
		t.Fatalf("deliveries %d, want 3", n)
	}
}

// callbackPayload is the JSON QStash posts to callbacks.
type callbackPayload struct {
	Status          int                 `json:"status"`
	Header          map[string][]string `json:"header"`
	Body            string              `json:"body"`
	Retried         int                 `json:"retried"`
	MaxRetries      int                 `json:"maxRetries"`
	DlqID           string              `json:"dlqId"`
	SourceMessageID string              `json:"sourceMessageId"`
	URL             string              `json:"url"`
	Method          string              `json:"method"`
	SourceHeader    map[string][]string `json:"sourceHeader"`
	SourceBody      string              `json:"sourceBody"`
}

func TestCallbacks(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{BackoffScale: 0.001})
	cb := qstashdevtest.NewSink(t, nil)
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/fails" {
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("nope"))
			return
		}
		w.Write([]byte("done"))
	})
	ok := h.Publish(dst.URL("/ok"), hdr("Upstash-Callback", cb.URL("/cb"), "Upstash-Callback-Forward-X-Cb", "yes"), "in")
	failed := h.Publish(dst.URL("/fails"), hdr(
		"Upstash-Retries", "1",
		"Upstash-Callback", cb.URL("/cb"),
		"Upstash-Failure-Callback", cb.URL("/failure"),
		"Upstash-Forward-X-Src", "s",
	), "source body")
	h.WaitIdle()

	var calls, failures []callbackPayload
	for _, d := range cb.Deliveries() {
		var p callbackPayload
		mustJSON(t, d.Body, &p)
		claims := parseSignature(t, d.Header.Get("Upstash-Signature"), qstashdev.DefaultCurrentSigningKey)
		if claims["sub"] != cb.URL(d.Path) {
			t.Errorf("callback signed for %v, delivered to %s", claims["sub"], cb.URL(d.Path))
		}
		if d.Header.Get("Content-Type") != "application/json" {
			t.Errorf("callback content type %q", d.Header.Get("Content-Type"))
		}
		switch d.Path {
		case "/cb":
			calls = append(calls, p)
		case "/failure":
			failures = append(failures, p)
		}
		if p.SourceMessageID == ok && d.Header.Get("X-Cb") != "yes" {
			t.Errorf("Upstash-Callback-Forward-X-Cb not forwarded to the callback")
		}
	}
	// One callback for the success, one per attempt of the failing message.
	if len(calls) != 3 {
		t.Fatalf("callbacks %d, want 3: %+v", len(calls), calls)
	}
	perSource := map[string][]callbackPayload{}
	for _, c := range calls {
		perSource[c.SourceMessageID] = append(perSource[c.SourceMessageID], c)
	}
	okCB := perSource[ok]
	if len(okCB) != 1 || okCB[0].Status != 200 || b64(okCB[0].Body) != "done" || b64(okCB[0].SourceBody) != "in" || okCB[0].URL != dst.URL("/ok") {
		t.Fatalf("success callback %+v", okCB)
	}
	failCB := perSource[failed]
	if len(failCB) != 2 || failCB[0].Status != 500 || b64(failCB[0].Body) != "nope" || failCB[0].MaxRetries != 1 ||
		failCB[0].Retried+failCB[1].Retried != 1 || failCB[0].Method != "POST" || failCB[0].SourceHeader["X-Src"][0] != "s" {
		t.Fatalf("callbacks of the failing message %+v", failCB)
	}
	dlq := h.Server.DLQ()
	if len(failures) != 1 || len(dlq) != 1 {
		t.Fatalf("failure callbacks %d and DLQ entries %d, want 1 and 1", len(failures), len(dlq))
	}
	f := failures[0]
	if f.DlqID != dlq[0].DLQID || f.SourceMessageID != failed || f.Status != 500 || f.Retried != 1 || b64(f.SourceBody) != "source body" {
		t.Fatalf("failure callback %+v (DLQ id %s)", f, dlq[0].DLQID)
	}
}

func b64(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "<bad base64: " + s + ">"
	}
	return string(b)
}

// gate is a destination that holds each request until released, tracking
// how many are in flight at most.
type gate struct {
	arrived  chan string
	release  chan struct{}
	inflight atomic.Int32
	maxSeen  atomic.Int32
}

func newGate() *gate {
	return &gate{arrived: make(chan string, 100), release: make(chan struct{})}
}

func (g *gate) handle(w http.ResponseWriter, r *http.Request, n int) {
	cur := g.inflight.Add(1)
	for {
		m := g.maxSeen.Load()
		if cur <= m || g.maxSeen.CompareAndSwap(m, cur) {
			break
		}
	}
	g.arrived <- r.URL.Path
	select {
	case <-g.release:
	case <-r.Context().Done():
	}
	g.inflight.Add(-1)
}

func (g *gate) next(t *testing.T) string {
	t.Helper()
	select {
	case p := <-g.arrived:
		return p
	case <-time.After(qstashdevtest.WaitTimeout):
		t.Fatal("no delivery arrived")
		return ""
	}
}

func TestFlowControlParallelism(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Concurrency: 8})
	g := newGate()
	dstA, dstB := qstashdevtest.NewSink(t, g.handle), qstashdevtest.NewSink(t, g.handle)
	const n = 12
	for i := range n {
		// The key limits across URLs.
		url := dstA.URL("/a")
		if i%2 == 1 {
			url = dstB.URL("/b")
		}
		h.Publish(url, hdr("Upstash-Flow-Control-Key", "tenant-1", "Upstash-Flow-Control-Value", "parallelism=2"), "x")
	}
	// Two start; after that each release lets exactly one more start. With
	// 8 workers and no limit, all 8 would be in flight at once.
	g.next(t)
	g.next(t)
	for range n - 2 {
		g.release <- struct{}{}
		g.next(t)
	}
	for range 2 {
		g.release <- struct{}{}
	}
	h.WaitIdle()
	if got := g.maxSeen.Load(); got != 2 {
		t.Fatalf("at most %d deliveries in flight, want 2", got)
	}
	if got := dstA.Count() + dstB.Count(); got != n {
		t.Fatalf("deliveries %d, want %d", got, n)
	}
}

func TestFlowControlRate(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	dst := qstashdevtest.NewSink(t, nil)
	start := clock.Now()
	for range 5 {
		h.Publish(dst.URL("/r"), hdr("Upstash-Flow-Control-Key", "k", "Upstash-Flow-Control-Value", "rate=2, period=1m"), "x")
	}
	// Two per minute: 2 now, 2 after one minute, 1 after two.
	for i, want := range []int{2, 4, 5} {
		h.WaitFor(strconv.Itoa(want)+" deliveries", func() bool { return dst.Count() >= want })
		if i < 2 {
			next := start.Add(time.Duration(i+1) * time.Minute)
			clock.WaitTimer(t, next)
			if got := dst.Count(); got != want {
				t.Fatalf("deliveries before %v: %d, want %d", next.Sub(start), got, want)
			}
			clock.Advance(time.Minute)
		}
	}
	h.WaitIdle()
	if n := dst.Count(); n != 5 {
		t.Fatalf("deliveries %d, want 5", n)
	}
}

func TestQueueFIFO(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{BackoffScale: 0.001, Concurrency: 8})
	var inflight, maxSeen atomic.Int32
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		cur := inflight.Add(1)
		defer inflight.Add(-1)
		if cur > maxSeen.Load() {
			maxSeen.Store(cur)
		}
		// The head fails once: FIFO must hold through its retry.
		if n == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	for i := range 10 {
		status, _, b := h.Do(http.MethodPost, "/v2/enqueue/ordered/"+dst.URL("/q"), nil, strconv.Itoa(i))
		if status != http.StatusOK {
			t.Fatalf("enqueue: %d %s", status, b)
		}
	}
	h.WaitIdle()
	var order []string
	for _, d := range dst.Deliveries() {
		order = append(order, string(d.Body))
	}
	if got := strings.Join(order, ","); got != "0,0,1,2,3,4,5,6,7,8,9" {
		t.Fatalf("delivery order %s", got)
	}
	if maxSeen.Load() != 1 {
		t.Fatalf("queue with parallelism 1 had %d deliveries in flight", maxSeen.Load())
	}
	if qs := h.Server.Queues(); len(qs) != 1 || qs[0].Name != "ordered" || qs[0].Parallelism != 1 || qs[0].Lag != 0 {
		t.Fatalf("queues %+v", qs)
	}
}

func TestQueueParallelism(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Concurrency: 8})
	g := newGate()
	dst := qstashdevtest.NewSink(t, g.handle)
	if status, _, b := h.Do(http.MethodPost, "/v2/queues", nil, `{"queueName":"wide","parallelism":3}`); status != http.StatusOK {
		t.Fatalf("upsert queue: %d %s", status, b)
	}
	for i := range 9 {
		if status, _, b := h.Do(http.MethodPost, "/v2/enqueue/wide/"+dst.URL("/w"), nil, strconv.Itoa(i)); status != http.StatusOK {
			t.Fatalf("enqueue: %d %s", status, b)
		}
	}
	for range 3 {
		g.next(t)
	}
	for range 6 {
		g.release <- struct{}{}
		g.next(t)
	}
	for range 3 {
		g.release <- struct{}{}
	}
	h.WaitIdle()
	if got := g.maxSeen.Load(); got != 3 {
		t.Fatalf("at most %d in flight, want the queue's parallelism 3", got)
	}
}

func TestDelayAndNotBefore(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	dst := qstashdevtest.NewSink(t, nil)
	start := clock.Now()
	delayed := h.Publish(dst.URL("/delayed"), hdr("Upstash-Delay", "1d10h30m"), "d")
	// Not-Before wins over Delay.
	nb := start.Add(time.Hour)
	notBefore := h.Publish(dst.URL("/nb"), hdr("Upstash-Delay", "10s", "Upstash-Not-Before", strconv.FormatInt(nb.Unix(), 10)), "n")

	m, _ := h.Server.Message(notBefore)
	if !m.NextDeliveryTime.Equal(nb) {
		t.Fatalf("not-before message due %v, want %v", m.NextDeliveryTime, nb)
	}
	clock.WaitTimer(t, nb)
	if dst.Count() != 0 {
		t.Fatal("delivered before its time")
	}
	clock.Advance(time.Hour)
	h.WaitFor("not-before delivery", func() bool { return dst.Count() == 1 })

	due := start.Add(34*time.Hour + 30*time.Minute)
	if m, _ := h.Server.Message(delayed); !m.NextDeliveryTime.Equal(due) {
		t.Fatalf("delayed message due %v, want %v", m.NextDeliveryTime, due)
	}
	clock.WaitTimer(t, due)
	clock.Advance(due.Sub(clock.Now()) - time.Second)
	clock.WaitTimer(t, due)
	if dst.Count() != 1 {
		t.Fatal("delayed message delivered early")
	}
	clock.Advance(time.Second)
	h.WaitIdle()
	got := dst.Deliveries()
	if len(got) != 2 || got[0].Path != "/nb" || got[1].Path != "/delayed" {
		t.Fatalf("deliveries %+v", got)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	g := newGate()
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/inflight" {
			g.handle(w, r, n)
			w.WriteHeader(http.StatusInternalServerError)
		}
	})

	// A waiting message is cancelled at once.
	waiting := h.Publish(dst.URL("/later"), hdr("Upstash-Delay", "1m"), "x")
	if status, _, b := h.Do(http.MethodDelete, "/v2/messages/"+waiting, nil, ""); status != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", status, b)
	}
	if status, _, _ := h.Do(http.MethodGet, "/v2/messages/"+waiting, nil, ""); status != http.StatusNotFound {
		t.Fatalf("GET cancelled message: %d, want 404", status)
	}
	if got := strings.Join(h.States(waiting), ","); got != "CREATED,CANCEL_REQUESTED,CANCELLED" {
		t.Fatalf("states %s", got)
	}

	// A message in flight finishes its attempt, then is not retried.
	inflight := h.Publish(dst.URL("/inflight"), hdr("Upstash-Retries", "3"), "y")
	g.next(t)
	if status, _, b := h.Do(http.MethodDelete, "/v2/messages/"+inflight, nil, ""); status != http.StatusAccepted {
		t.Fatalf("cancel in flight: %d %s", status, b)
	}
	if m, ok := h.Server.Message(inflight); !ok || m.State != qstashdev.StateCancelRequested {
		t.Fatalf("in-flight message after cancel: %+v %v", m, ok)
	}
	g.release <- struct{}{}
	h.WaitIdle()
	if got := strings.Join(h.States(inflight), ","); got != "CREATED,ACTIVE,CANCEL_REQUESTED,ERROR,CANCELLED" {
		t.Fatalf("states %s", got)
	}
	clock.Advance(time.Hour)
	if n := dst.Count(); n != 1 {
		t.Fatalf("deliveries %d, want only the one in flight", n)
	}
	if len(h.Server.DLQ()) != 0 {
		t.Fatal("cancelled message went to the DLQ")
	}
	if status, _, _ := h.Do(http.MethodDelete, "/v2/messages/msg_unknown", nil, ""); status != http.StatusNotFound {
		t.Fatalf("cancel unknown: %d, want 404", status)
	}
}

func TestKeyRotation(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{CurrentSigningKey: "sig_current", NextSigningKey: "sig_next"})
	dst := qstashdevtest.NewSink(t, nil)
	h.Publish(dst.URL("/k"), nil, "1")
	h.WaitIdle()
	parseSignature(t, dst.Deliveries()[0].Header.Get("Upstash-Signature"), "sig_current")

	status, _, b := h.Do(http.MethodPost, "/v2/keys/rotate", nil, "")
	if status != http.StatusOK {
		t.Fatalf("rotate: %d %s", status, b)
	}
	var keys qstashdev.SigningKeys
	mustJSON(t, b, &keys)
	if keys.Current != "sig_next" || keys.Next == "sig_next" || keys.Next == "sig_current" || !strings.HasPrefix(keys.Next, "sig_") {
		t.Fatalf("rotated keys %+v", keys)
	}
	h.Publish(dst.URL("/k"), nil, "2")
	h.WaitIdle()
	sig := dst.Deliveries()[1].Header.Get("Upstash-Signature")
	parseSignature(t, sig, "sig_next")
	if _, err := jwtParse(sig, "sig_current"); err == nil {
		t.Fatal("after rotation a delivery still verifies with the old current key")
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Token: "secret"})
	cases := []struct {
		name   string
		path   string
		header http.Header
		want   int
	}{
		{"no credentials", "/v2/keys", hdr("Authorization", ""), http.StatusUnauthorized},
		{"wrong token", "/v2/keys", hdr("Authorization", "Bearer "+qstashdev.DefaultToken), http.StatusUnauthorized},
		{"not bearer", "/v2/keys", hdr("Authorization", "Basic secret"), http.StatusUnauthorized},
		{"bearer", "/v2/keys", hdr("Authorization", "Bearer secret"), http.StatusOK},
		{"query token", "/v2/keys?qstash_token=secret", hdr("Authorization", ""), http.StatusOK},
		{"wrong query token", "/v2/keys?qstash_token=nope", hdr("Authorization", ""), http.StatusUnauthorized},
	}
	for _, tc := range cases {
		status, header, b := h.Do(http.MethodGet, tc.path, tc.header, "")
		if status != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, status, tc.want)
		}
		if tc.want == http.StatusUnauthorized {
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(b, &e) != nil || e.Error == "" || header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: body %s is not a JSON error", tc.name, b)
			}
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{MaxBodyBytes: 1024})
	dst := qstashdevtest.NewSink(t, nil)
	status, _, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/big"), nil, strings.Repeat("x", 1025))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("1025 bytes: %d %s, want 413 with a JSON error", status, b)
	}
	h.Publish(dst.URL("/fits"), nil, strings.Repeat("x", 1024))
	h.WaitIdle()
	if got := dst.Deliveries(); len(got) != 1 || got[0].Path != "/fits" {
		t.Fatalf("deliveries %+v", got)
	}
}

func TestBatchWithBadElement(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{MaxBodyBytes: 16})
	dst := qstashdevtest.NewSink(t, nil)
	batch := `[
		{"destination":"` + dst.URL("/1") + `","headers":{"Upstash-Forward-X-I":"1"},"body":"one","queue":""},
		{"destination":"ftp://nope","body":"bad"},
		{"destination":"` + dst.URL("/3") + `","headers":{"Upstash-Retries":"many"},"body":"bad header"},
		{"destination":"no-such-group","body":"unknown group"},
		{"destination":"` + dst.URL("/5") + `","body":"` + strings.Repeat("x", 17) + `"},
		{"destination":"` + dst.URL("/6") + `","body":"six"}
	]`
	status, _, b := h.Do(http.MethodPost, "/v2/batch", hdr("Content-Type", "application/json"), batch)
	if status != http.StatusOK {
		t.Fatalf("batch: %d %s", status, b)
	}
	var res []struct {
		MessageID string `json:"messageId"`
		Error     string `json:"error"`
	}
	mustJSON(t, b, &res)
	if len(res) != 6 {
		t.Fatalf("answer has %d elements, want 6: %s", len(res), b)
	}
	for i, r := range res {
		bad := i >= 1 && i <= 4
		if bad != (r.Error != "") || bad == (r.MessageID != "") {
			t.Errorf("element %d: %+v (bad: %v)", i, r, bad)
		}
	}
	h.WaitIdle()
	got := dst.Deliveries()
	if len(got) != 2 || got[0].Header.Get("X-I")+got[1].Header.Get("X-I") != "1" {
		t.Fatalf("deliveries %+v", got)
	}
	if status, _, _ := h.Do(http.MethodPost, "/v2/batch", nil, `{"not":"an array"}`); status != http.StatusBadRequest {
		t.Fatalf("malformed batch: %d, want 400", status)
	}
}

func TestRejectHook(t *testing.T) {
	t.Parallel()
	reset := time.Unix(1_900_000_000, 0)
	var rejectNext atomic.Bool
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Reject: func(r *http.Request) *qstashdev.Rejection {
		if strings.HasPrefix(r.URL.Path, "/v2/publish/") && rejectNext.CompareAndSwap(true, false) {
			return qstashdev.BurstRateLimited(100, reset)
		}
		return nil
	}})
	dst := qstashdevtest.NewSink(t, nil)
	rejectNext.Store(true)
	status, header, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/x"), nil, "x")
	if status != http.StatusTooManyRequests || header.Get("Burst-RateLimit-Reset") != "1900000000" ||
		header.Get("Burst-RateLimit-Remaining") != "0" || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("rejected publish: %d %v %s", status, header, b)
	}
	h.Publish(dst.URL("/x"), nil, "x") // the next one goes through
	h.WaitIdle()
	if dst.Count() != 1 {
		t.Fatal("the rejected publish was delivered, or the accepted one was not")
	}
	if r := qstashdev.RateLimited(500, reset); r.Header.Get("RateLimit-Limit") != "500" || r.Header.Get("RateLimit-Reset") != "1900000000" {
		t.Fatalf("RateLimited %+v", r)
	}
}

func TestEnqueueToURLGroupAndUnknownGroup(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	a := qstashdevtest.NewSink(t, nil)
	if status, _, b := h.Do(http.MethodPost, "/v2/topics/g/endpoints", nil, `{"endpoints":[{"url":"`+a.URL("/1")+`"},{"url":"`+a.URL("/2")+`"}]}`); status != http.StatusOK {
		t.Fatalf("upsert endpoints: %d %s", status, b)
	}
	status, _, b := h.Do(http.MethodPost, "/v2/enqueue/gq/g", nil, "x")
	var res []struct {
		MessageID string `json:"messageId"`
		URL       string `json:"url"`
	}
	mustJSON(t, b, &res)
	if status != http.StatusOK || len(res) != 2 || res[0].URL != a.URL("/1") {
		t.Fatalf("enqueue to group: %d %s", status, b)
	}
	h.WaitIdle()
	if a.Count() != 2 {
		t.Fatalf("deliveries %d, want 2", a.Count())
	}
	if status, _, _ := h.Do(http.MethodPost, "/v2/publish/missing", nil, "x"); status != http.StatusNotFound {
		t.Fatalf("publish to unknown group: %d, want 404", status)
	}
	if status, _, _ := h.Do(http.MethodPost, "/v2/publish/ftp://x", nil, "x"); status != http.StatusBadRequest {
		t.Fatalf("publish to ftp URL: %d, want 400", status)
	}
}

func TestShutdownLetsAttemptsFinish(t *testing.T) {
	t.Parallel()
	srv, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln := listenLocal(t)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	h := &qstashdevtest.Harness{T: t, Server: srv}
	g := newGate()
	dst := qstashdevtest.NewSink(t, g.handle)

	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v2/publish/"+dst.URL("/s"), strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+qstashdev.DefaultToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	g.next(t)

	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	// WaitIdle returns ErrClosed once Shutdown has begun; only then is the
	// attempt released, so Shutdown is seen waiting for it.
	ctx, cancel := context.WithTimeout(context.Background(), qstashdevtest.WaitTimeout)
	defer cancel()
	if err := h.Server.WaitIdle(ctx); err != qstashdev.ErrClosed {
		t.Fatalf("WaitIdle during Shutdown: %v, want ErrClosed", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with an attempt in flight", err)
	default:
	}
	g.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-serveErr; err != http.ErrServerClosed {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
	states := ""
	for _, e := range srv.Events() {
		states += e.State + ","
	}
	if states != "CREATED,ACTIVE,DELIVERED," {
		t.Fatalf("events %s: the attempt in flight should have completed", states)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestCloseCancelsAttempts(t *testing.T) {
	t.Parallel()
	srv, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestAPI(t, srv)
	h := &qstashdevtest.Harness{T: t, Server: srv, API: ts}
	g := newGate()
	dst := qstashdevtest.NewSink(t, g.handle)
	h.Publish(dst.URL("/hang"), nil, "x")
	g.next(t)
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	// Close must not wait for the hung destination.
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(qstashdevtest.WaitTimeout):
		t.Fatal("Close waited for a hung destination")
	}
	if status, _, _ := h.Do(http.MethodGet, "/v2/keys", nil, ""); status != http.StatusServiceUnavailable {
		t.Fatalf("API after Close: %d, want 503", status)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []qstashdev.Config{
		{Concurrency: -1},
		{MaxBodyBytes: -5},
		{BackoffScale: -1},
		{CurrentSigningKey: "sig_a", NextSigningKey: "sig_a"},
	} {
		if srv, err := qstashdev.New(cfg); err == nil {
			srv.Close()
			t.Errorf("New(%+v) accepted an invalid config", cfg)
		}
	}
}

func TestListenAndServe(t *testing.T) {
	t.Parallel()
	srv, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ListenAndServe(context.Background(), "256.0.0.1:99999"); err == nil {
		t.Fatal("ListenAndServe on a bad address succeeded")
	}

	srv, err = qstashdev.New(qstashdev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a done context shuts the server down at once
	if err := srv.ListenAndServe(ctx, "127.0.0.1:0"); err != nil {
		t.Fatalf("ListenAndServe after cancel: %v", err)
	}
	if err := srv.WaitIdle(context.Background()); err != qstashdev.ErrClosed {
		t.Fatalf("WaitIdle after ListenAndServe returned: %v, want ErrClosed", err)
	}
}

func TestUserinfoDestination(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	url := strings.Replace(dst.URL("/basic"), "http://", "http://user:pass@", 1)
	h.Publish(url, nil, "x")
	h.WaitIdle()
	if got := dst.Deliveries(); len(got) != 1 || got[0].Header.Get("Authorization") != "Basic dXNlcjpwYXNz" {
		t.Fatalf("deliveries %+v: want Basic auth from the URL's userinfo", got)
	}
}

func TestEventsFilterByLabel(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	id := h.Publish(dst.URL("/l"), hdr("Upstash-Label", "billing"), "x")
	h.Publish(dst.URL("/l"), nil, "y")
	h.WaitIdle()
	status, _, b := h.Do(http.MethodGet, "/v2/events?label=billing", nil, "")
	var res struct {
		Events []struct {
			MessageID string `json:"messageId"`
			Label     string `json:"label"`
		} `json:"events"`
	}
	mustJSON(t, b, &res)
	if status != http.StatusOK || len(res.Events) != 3 {
		t.Fatalf("events with label: %d %s", status, b)
	}
	for _, e := range res.Events {
		if e.MessageID != id || e.Label != "billing" {
			t.Fatalf("event %+v", e)
		}
	}
}
