package qstashdev_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// wantPendingRefused checks a 429 answer for a full server: a JSON error,
// and a Retry-After a publisher's back-off can follow.
func wantPendingRefused(t *testing.T, what string, status int, header http.Header, body []byte) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if status != http.StatusTooManyRequests || json.Unmarshal(body, &e) != nil || e.Error == "" ||
		header.Get("Content-Type") != "application/json" || header.Get("Retry-After") == "" {
		t.Fatalf("%s: %d %v %s, want 429 with a JSON error and Retry-After", what, status, header, body)
	}
}

func TestPendingMessageCap(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock, MaxPendingMessages: 3})
	dst := qstashdevtest.NewSink(t, nil)
	delayed := hdr("Upstash-Delay", "1m")
	for range 3 {
		h.Publish(dst.URL("/p"), delayed, "x")
	}
	status, header, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/p"), delayed, "x")
	wantPendingRefused(t, "4th pending message", status, header, b)
	status, header, b = h.Do(http.MethodPost, "/v2/batch", nil, `[{"destination":"`+dst.URL("/b")+`","body":"y"}]`)
	wantPendingRefused(t, "batch beyond the cap", status, header, b)
	if n := len(h.Server.Messages()); n != 3 {
		t.Fatalf("%d messages pending, want 3", n)
	}

	// Delivered messages free their places.
	clock.WaitTimer(t, clock.Now().Add(time.Minute))
	clock.Advance(time.Minute)
	h.WaitIdle()
	for range 3 {
		h.Publish(dst.URL("/again"), nil, "z")
	}
	h.WaitIdle()
	if n := dst.Count(); n != 6 {
		t.Fatalf("%d deliveries, want 6", n)
	}
}

// Pending bytes are the body, the destination URL, headers and option
// strings. Every destination below has the length u of dst.URL("/p"), so
// the cap is 250 bytes of bodies and headers beside three URLs.
func TestPendingBytesCap(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	dst := qstashdevtest.NewSink(t, nil)
	u := int64(len(dst.URL("/p")))
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock, MaxBodyBytes: 100, MaxPendingBytes: 250 + 3*u})
	delayed := hdr("Upstash-Delay", "1m")
	publish := func(header http.Header, n int) (int, http.Header, []byte) {
		t.Helper()
		hh := delayed.Clone()
		for k, v := range header {
			hh[k] = v
		}
		return h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/p"), hh, strings.Repeat("b", n))
	}
	if s, _, b := publish(nil, 100); s != http.StatusOK {
		t.Fatalf("100 bytes: %d %s", s, b)
	}
	first := h.Server.Messages()[0].ID
	if s, _, b := publish(nil, 100); s != http.StatusOK {
		t.Fatalf("200 bytes: %d %s", s, b)
	}
	s, hd, b := publish(nil, 51)
	wantPendingRefused(t, "251 bytes pending", s, hd, b)
	if s, _, b := publish(nil, 50); s != http.StatusOK {
		t.Fatalf("exactly 250 bytes (and three URLs) pending: %d %s, want 200", s, b)
	}

	// Forwarded headers count too: "X" and "123456789" are 10 bytes.
	if !h.Server.Cancel(first) {
		t.Fatal("cancel failed")
	}
	withHeader := hdr("Upstash-Forward-X", "123456789")
	s, hd, b = publish(withHeader, 91)
	wantPendingRefused(t, "251 bytes with a header", s, hd, b)
	if s, _, b := publish(withHeader, 90); s != http.StatusOK {
		t.Fatalf("250 bytes with a header: %d %s, want 200", s, b)
	}

	// A batch is taken whole or refused whole.
	if status, _, b := h.Do(http.MethodDelete, "/v2/messages", nil, ""); status != http.StatusAccepted {
		t.Fatalf("cancel all: %d %s", status, b)
	}
	h.WaitIdle()
	item := func(n int) string {
		return `{"destination":"` + dst.URL("/b") + `","headers":{"Upstash-Delay":"1m"},"body":"` + strings.Repeat("c", n) + `"}`
	}
	s, hd, b = h.Do(http.MethodPost, "/v2/batch", nil, "["+item(100)+","+item(100)+","+item(51)+"]")
	wantPendingRefused(t, "batch of 251 bytes", s, hd, b)
	if n := len(h.Server.Messages()); n != 0 {
		t.Fatalf("a refused batch left %d messages pending", n)
	}
	if s, _, b := h.Do(http.MethodPost, "/v2/batch", nil, "["+item(100)+","+item(100)+","+item(50)+"]"); s != http.StatusOK || strings.Contains(string(b), "error") {
		t.Fatalf("batch of 250 bytes: %d %s, want 200", s, b)
	}
	if n := len(h.Server.Messages()); n != 3 {
		t.Fatalf("%d messages pending after the batch, want 3", n)
	}

	// A URL-group publish counts once per endpoint.
	if status, _, b := h.Do(http.MethodDelete, "/v2/messages", nil, ""); status != http.StatusAccepted {
		t.Fatalf("cancel all: %d %s", status, b)
	}
	h.WaitIdle()
	eps := `{"endpoints":[{"url":"` + dst.URL("/1") + `"},{"url":"` + dst.URL("/2") + `"},{"url":"` + dst.URL("/3") + `"}]}`
	if status, _, b := h.Do(http.MethodPost, "/v2/topics/fan/endpoints", nil, eps); status != http.StatusOK {
		t.Fatalf("create group: %d %s", status, b)
	}
	s, hd, b = h.Do(http.MethodPost, "/v2/publish/fan", delayed, strings.Repeat("g", 84))
	wantPendingRefused(t, "3 × 84 bytes", s, hd, b)
	if s, _, b := h.Do(http.MethodPost, "/v2/publish/fan", delayed, strings.Repeat("g", 83)); s != http.StatusOK {
		t.Fatalf("3 × 83 bytes: %d %s, want 200", s, b)
	}
}

// With the defaults, a stream of maximal delayed messages stops at
// 64 MiB instead of growing the heap by every megabyte sent: 63 messages
// of 1 MiB, as each one's URL counts too.
func TestDefaultPendingBytesCap(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: qstashdevtest.NewFakeClock()})
	dst := qstashdevtest.NewSink(t, nil)
	body := strings.Repeat("m", 1<<20)
	accepted := 0
	for range 70 {
		status, header, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/big"), hdr("Upstash-Delay", "1h"), body)
		if status == http.StatusOK {
			accepted++
			continue
		}
		wantPendingRefused(t, "a maximal message beyond the default cap", status, header, b)
		break
	}
	if accepted != 63 {
		t.Fatalf("%d maximal messages accepted, want 63 (64 MiB)", accepted)
	}
}

// The DLQ holds whole messages and their last responses; a count bound
// alone lets 10,000 maximal entries hold gigabytes.
func TestDLQBytesCap(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{MaxBodyBytes: 100, MaxDLQBytes: 1000})
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Upstash-NonRetryable-Error", "true")
		w.WriteHeader(489)
	})
	var last string
	for range 30 {
		last = h.Publish(dst.URL("/dead"), nil, strings.Repeat("d", 100))
		h.WaitIdle()
	}
	dlq := h.Server.DLQ()
	if len(dlq) == 0 || len(dlq) >= 10 {
		t.Fatalf("DLQ holds %d entries of 100 bytes and more, want 1 to 9 within 1000 bytes", len(dlq))
	}
	if dlq[len(dlq)-1].Message.ID != last {
		t.Fatalf("newest DLQ entry is %s, want %s: the oldest go first", dlq[len(dlq)-1].Message.ID, last)
	}
}

// Queues and URL groups are created on first use and outlive their
// messages: a publisher naming a queue per aggregate would grow them
// forever. Beyond their bounds QStash's limit answer, 412, comes back.
func TestQueueAndURLGroupBounds(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{MaxQueues: 2, MaxURLGroups: 1})
	dst := qstashdevtest.NewSink(t, nil)
	wantLimit := func(what string, status int, b []byte) {
		t.Helper()
		var e struct {
			Error string `json:"error"`
		}
		if status != http.StatusPreconditionFailed || json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Fatalf("%s: %d %s, want 412 with a JSON error", what, status, b)
		}
	}
	for _, q := range []string{"q1", "q2"} {
		if status, _, b := h.Do(http.MethodPost, "/v2/enqueue/"+q+"/"+dst.URL("/q"), nil, "x"); status != http.StatusOK {
			t.Fatalf("enqueue to %s: %d %s", q, status, b)
		}
	}
	status, _, b := h.Do(http.MethodPost, "/v2/enqueue/q3/"+dst.URL("/q"), nil, "x")
	wantLimit("a third queue", status, b)
	status, _, b = h.Do(http.MethodPost, "/v2/queues", nil, `{"queueName":"q4","parallelism":1}`)
	wantLimit("upserting a third queue", status, b)
	if status, _, b := h.Do(http.MethodPost, "/v2/enqueue/q1/"+dst.URL("/q"), nil, "x"); status != http.StatusOK {
		t.Fatalf("enqueue to an existing queue: %d %s", status, b)
	}
	if status, _, b := h.Do(http.MethodDelete, "/v2/queues/q2", nil, ""); status != http.StatusOK {
		t.Fatalf("delete q2: %d %s", status, b)
	}
	if status, _, b := h.Do(http.MethodPost, "/v2/enqueue/q3/"+dst.URL("/q"), nil, "x"); status != http.StatusOK {
		t.Fatalf("enqueue to q3 once q2 is gone: %d %s", status, b)
	}

	ep := func(urls ...string) string {
		var parts []string
		for _, u := range urls {
			parts = append(parts, `{"url":"`+u+`"}`)
		}
		return `{"endpoints":[` + strings.Join(parts, ",") + `]}`
	}
	if status, _, b := h.Do(http.MethodPost, "/v2/topics/g1/endpoints", nil, ep(dst.URL("/a"))); status != http.StatusOK {
		t.Fatalf("create g1: %d %s", status, b)
	}
	status, _, b = h.Do(http.MethodPost, "/v2/topics/g2/endpoints", nil, ep(dst.URL("/a")))
	wantLimit("a second URL group", status, b)

	many := make([]string, 1001)
	for i := range many {
		many[i] = dst.URL("/e" + strings.Repeat("x", i%7) + "/" + string(rune('a'+i%26)) + "/" + strconv.Itoa(i))
	}
	status, _, b = h.Do(http.MethodPost, "/v2/topics/g1/endpoints", nil, ep(many...))
	wantLimit("1001 more endpoints", status, b)
	if g := h.Server.URLGroups(); len(g) != 1 || len(g[0].Endpoints) != 1 {
		t.Fatalf("a refused upsert changed the groups: %+v", g)
	}
	if status, _, b := h.Do(http.MethodPost, "/v2/topics/g1/endpoints", nil, ep(many[:999]...)); status != http.StatusOK {
		t.Fatalf("1000 endpoints in all: %d %s", status, b)
	}
}

// Strings a message keeps beyond its body are bounded too: each lands in
// the event log, the DLQ or the deduplication index, which bound their
// entries by count only.
func TestOptionLengthBounds(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	long := strings.Repeat("l", 4<<10+1)
	for _, tc := range []struct {
		name string
		dest string
		head http.Header
	}{
		{"label", dst.URL("/o"), hdr("Upstash-Label", long)},
		{"deduplication id", dst.URL("/o"), hdr("Upstash-Deduplication-Id", long)},
		{"flow-control key", dst.URL("/o"), hdr("Upstash-Flow-Control-Key", long)},
		{"retry delay", dst.URL("/o"), hdr("Upstash-Retry-Delay", strings.Repeat("1+", 2<<10)+"1")},
		{"callback url", dst.URL("/o"), hdr("Upstash-Callback", dst.URL("/"+strings.Repeat("c", 16<<10)))},
		{"destination url", dst.URL("/" + strings.Repeat("d", 16<<10)), nil},
	} {
		status, _, b := h.Do(http.MethodPost, "/v2/publish/"+tc.dest, tc.head, "x")
		if status != http.StatusBadRequest || !strings.Contains(string(b), "longer than") {
			t.Errorf("%s too long: %d %.200s, want 400 naming the limit", tc.name, status, b)
		}
	}
	// At the bounds, all is accepted.
	h.Publish(dst.URL("/o"), hdr("Upstash-Label", long[:4<<10], "Upstash-Deduplication-Id", long[:4<<10]), "x")
	h.WaitIdle()
}
