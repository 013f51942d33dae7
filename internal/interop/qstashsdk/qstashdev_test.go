package qstashsdk_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	qstash "github.com/upstash/qstash-go"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The official Go SDK, unmodified, is the reference client: each test drives
// one part of it against qstashdev. They cannot run in parallel because the
// SDK reads QSTASH_URL from the environment, which t.Setenv pins here so a
// developer's own QSTASH_URL cannot redirect the tests.

func sdkClient(t *testing.T, h *qstashdevtest.Harness) *qstash.Client {
	t.Setenv("QSTASH_URL", h.API.URL)
	return qstash.NewClientWith(qstash.Options{Url: h.API.URL, Token: qstashdev.DefaultToken, Client: h.API.Client()})
}

func TestSDKPublishURL(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)

	res, err := c.Publish(qstash.PublishOptions{
		Url:         dst.URL("/orders?tenant=a"),
		Body:        `{"id":1}`,
		ContentType: "application/json",
		Headers:     map[string]string{"Ce-Type": "order.created"},
		Retries:     qstash.RetryCount(0),
	})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if !strings.HasPrefix(res.MessageId, "msg_") || res.Deduplicated {
		t.Fatalf("Publish answer %+v", res)
	}
	h.WaitIdle()
	got := dst.Deliveries()
	if len(got) != 1 {
		t.Fatalf("deliveries: %d, want 1", len(got))
	}
	d := got[0]
	if d.Path != "/orders?tenant=a" || string(d.Body) != `{"id":1}` {
		t.Errorf("delivered %s %q, want /orders?tenant=a {\"id\":1}", d.Path, d.Body)
	}
	if d.Header.Get("Ce-Type") != "order.created" || d.Header.Get("Content-Type") != "application/json" {
		t.Errorf("forwarded headers: %v", d.Header)
	}
	if d.Header.Get("Upstash-Message-Id") != res.MessageId {
		t.Errorf("Upstash-Message-Id %q, want %q", d.Header.Get("Upstash-Message-Id"), res.MessageId)
	}
	if got := h.States(res.MessageId); strings.Join(got, ",") != "CREATED,ACTIVE,DELIVERED" {
		t.Errorf("states %v", got)
	}
}

func TestSDKPublishURLGroup(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	a, b := qstashdevtest.NewSink(t, nil), qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)

	groups := c.UrlGroups()
	if err := groups.UpsertEndpoints("billing", []qstash.Endpoint{{Url: a.URL("/a"), Name: "a"}, {Url: b.URL("/b")}}); err != nil {
		t.Fatalf("UpsertEndpoints: %v", err)
	}
	g, err := groups.Get("billing")
	if err != nil || g.Name != "billing" || len(g.Endpoints) != 2 || g.Endpoints[0].Name != "a" {
		t.Fatalf("Get: %+v, %v", g, err)
	}
	list, err := groups.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("List: %+v, %v", list, err)
	}

	res, err := groups.Publish(qstash.PublishUrlGroupOptions{UrlGroup: "billing", Body: "hi"})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(res) != 2 || res[0].Url != a.URL("/a") || res[1].Url != b.URL("/b") || res[0].MessageId == res[1].MessageId {
		t.Fatalf("Publish answer %+v", res)
	}
	h.WaitIdle()
	for _, s := range []*qstashdevtest.Sink{a, b} {
		got := s.Deliveries()
		if len(got) != 1 || string(got[0].Body) != "hi" || got[0].Header.Get("Upstash-Topic-Name") != "billing" {
			t.Fatalf("group delivery %+v", got)
		}
	}

	if err := groups.RemoveEndpoints("billing", []qstash.Endpoint{{Name: "a"}}); err != nil {
		t.Fatalf("RemoveEndpoints: %v", err)
	}
	if g, _ := groups.Get("billing"); len(g.Endpoints) != 1 || g.Endpoints[0].Url != b.URL("/b") {
		t.Fatalf("after remove: %+v", g)
	}
	if err := groups.Delete("billing"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := groups.Get("billing"); err == nil {
		t.Fatal("Get after Delete succeeded")
	}
}

func TestSDKBatch(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)
	if err := c.UrlGroups().UpsertEndpoints("fan", []qstash.Endpoint{{Url: dst.URL("/g1")}, {Url: dst.URL("/g2")}}); err != nil {
		t.Fatalf("UpsertEndpoints: %v", err)
	}

	res, err := c.Batch([]qstash.BatchOptions{
		{Url: dst.URL("/one"), Body: "1", Headers: map[string]string{"X-N": "1"}},
		{Url: dst.URL("/two"), Body: "2", Queue: "q"},
		{UrlGroup: "fan", Body: "3"},
	})
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	if len(res) != 3 || len(res[0]) != 1 || len(res[1]) != 1 || len(res[2]) != 2 {
		t.Fatalf("Batch answer %+v", res)
	}
	h.WaitIdle()
	paths := map[string]string{}
	for _, d := range dst.Deliveries() {
		paths[d.Path] = string(d.Body)
		if d.Path == "/one" && d.Header.Get("X-N") != "1" {
			t.Errorf("forwarded header lost: %v", d.Header)
		}
	}
	want := map[string]string{"/one": "1", "/two": "2", "/g1": "3", "/g2": "3"}
	for p, b := range want {
		if paths[p] != b {
			t.Errorf("delivery to %s: %q, want %q (all: %v)", p, paths[p], b, paths)
		}
	}
	if qs := h.Server.Queues(); len(qs) != 1 || qs[0].Name != "q" {
		t.Errorf("queue from batch element: %+v", qs)
	}
}

func TestSDKEnqueue(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)
	queues := c.Queues()
	if err := queues.Upsert(qstash.Queue{Name: "jobs", Parallelism: 2}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if err := queues.Pause("jobs"); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	res, err := c.Enqueue(qstash.EnqueueOptions{Queue: "jobs", PublishOptions: qstash.PublishOptions{Url: dst.URL("/job"), Body: "j"}})
	if err != nil || res.MessageId == "" {
		t.Fatalf("Enqueue: %+v, %v", res, err)
	}
	q, err := queues.Get("jobs")
	if err != nil || q.Name != "jobs" || q.Parallelism != 2 || !q.IsPaused || q.Lag != 1 {
		t.Fatalf("Get paused queue: %+v, %v", q, err)
	}
	if n := dst.Count(); n != 0 {
		t.Fatalf("paused queue delivered %d messages", n)
	}
	if err := queues.Resume("jobs"); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	h.WaitIdle()
	if n := dst.Count(); n != 1 {
		t.Fatalf("deliveries after resume: %d", n)
	}
	list, err := queues.List()
	if err != nil || len(list) != 1 || list[0].Lag != 0 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	if err := queues.Delete("jobs"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := queues.Get("jobs"); err == nil {
		t.Fatal("Get after Delete succeeded")
	}
}

func TestSDKDLQ(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("X-Why", "broken")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("boom"))
	})
	c := sdkClient(t, h)
	var ids []string
	for _, p := range []string{"/a", "/b", "/c"} {
		res, err := c.Publish(qstash.PublishOptions{Url: dst.URL(p), Body: p, Retries: qstash.RetryCount(0)})
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
		ids = append(ids, res.MessageId)
		h.WaitIdle() // one at a time, so the DLQ order is the publish order
	}

	dlq := c.Dlq()
	msgs, cursor, err := dlq.List(qstash.ListDlqOptions{})
	if err != nil || len(msgs) != 3 || cursor != "" {
		t.Fatalf("List: %d messages, cursor %q, %v", len(msgs), cursor, err)
	}
	m := msgs[0]
	if m.MessageId != ids[0] || m.ResponseStatus != 500 || m.ResponseBody != "boom" ||
		m.ResponseHeaders.Get("X-Why") != "broken" || m.Body != "/a" || m.Url != dst.URL("/a") {
		t.Fatalf("DLQ entry %+v", m)
	}
	page, cursor, err := dlq.List(qstash.ListDlqOptions{Count: 2})
	if err != nil || len(page) != 2 || cursor == "" {
		t.Fatalf("List count=2: %d, cursor %q, %v", len(page), cursor, err)
	}
	rest, cursor2, err := dlq.List(qstash.ListDlqOptions{Count: 2, Cursor: cursor})
	if err != nil || len(rest) != 1 || rest[0].MessageId != ids[2] || cursor2 != "" {
		t.Fatalf("List page 2: %+v, cursor %q, %v", rest, cursor2, err)
	}
	filtered, _, err := dlq.List(qstash.ListDlqOptions{Filter: qstash.DlqFilter{Url: dst.URL("/b")}})
	if err != nil || len(filtered) != 1 || filtered[0].MessageId != ids[1] {
		t.Fatalf("List by url: %+v, %v", filtered, err)
	}
	got, err := dlq.Get(m.DlqId)
	if err != nil || got.MessageId != ids[0] {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	if err := dlq.Delete(m.DlqId); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := dlq.Get(m.DlqId); err == nil {
		t.Fatal("Get after Delete succeeded")
	}
	n, err := dlq.DeleteMany([]string{msgs[1].DlqId, msgs[2].DlqId, "nope"})
	if err != nil || n != 2 {
		t.Fatalf("DeleteMany: %d, %v", n, err)
	}
	if left := h.Server.DLQ(); len(left) != 0 {
		t.Fatalf("DLQ not empty: %+v", left)
	}
}

func TestSDKMessages(t *testing.T) {
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	dst := qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)
	res, err := c.Publish(qstash.PublishOptions{Url: dst.URL("/later"), Body: "x", Delay: "1h", Headers: map[string]string{"X-A": "b"}})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	m, err := c.Messages().Get(res.MessageId)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if m.MessageId != res.MessageId || m.Url != dst.URL("/later") || m.Body != "x" || m.Method != "POST" ||
		m.MaxRetries != 3 || m.Header.Get("X-A") != "b" || m.NotBefore != clock.Now().Add(time.Hour).UnixMilli() ||
		m.CreatedAt != clock.Now().UnixMilli() {
		t.Fatalf("Get: %+v", m)
	}
	if err := c.Messages().Cancel(res.MessageId); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := c.Messages().Get(res.MessageId); err == nil {
		t.Fatal("Get after Cancel succeeded")
	}
	if err := c.Messages().Cancel(res.MessageId); err == nil {
		t.Fatal("second Cancel succeeded")
	}

	var ids []string
	for range 3 {
		r, err := c.Publish(qstash.PublishOptions{Url: dst.URL("/later"), Body: "y", Delay: "1h"})
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
		ids = append(ids, r.MessageId)
	}
	n, err := c.Messages().CancelMany(ids[:2])
	if err != nil || n != 2 {
		t.Fatalf("CancelMany: %d, %v", n, err)
	}
	n, err = c.Messages().CancelAll()
	if err != nil || n != 1 {
		t.Fatalf("CancelAll: %d, %v", n, err)
	}
	h.WaitIdle()
	if dst.Count() != 0 {
		t.Fatalf("cancelled messages were delivered")
	}
}

func TestSDKEvents(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)
	res, err := c.Publish(qstash.PublishOptions{Url: dst.URL("/e"), Body: "e"})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	h.WaitIdle()
	events, cursor, err := c.Events().List(qstash.ListEventsOptions{Filter: qstash.EventFilter{MessageId: res.MessageId}})
	if err != nil || cursor != "" {
		t.Fatalf("List: %v, cursor %q", err, cursor)
	}
	var states []string
	for _, e := range events {
		states = append(states, string(e.State))
		if e.Url != dst.URL("/e") || e.Time == 0 {
			t.Errorf("event %+v", e)
		}
	}
	// Newest first, as QStash lists logs.
	if strings.Join(states, ",") != "DELIVERED,ACTIVE,CREATED" {
		t.Fatalf("states %v", states)
	}
	page, cursor, err := c.Events().List(qstash.ListEventsOptions{Count: 2})
	if err != nil || len(page) != 2 || cursor == "" {
		t.Fatalf("List count=2: %d, %q, %v", len(page), cursor, err)
	}
	more, _, err := c.Events().List(qstash.ListEventsOptions{Count: 2, Cursor: cursor})
	if err != nil || len(more) != 1 || more[0].State != qstash.Created {
		t.Fatalf("List page 2: %+v, %v", more, err)
	}
	delivered, _, err := c.Events().List(qstash.ListEventsOptions{Filter: qstash.EventFilter{State: qstash.Delivered}})
	if err != nil || len(delivered) != 1 {
		t.Fatalf("List by state: %+v, %v", delivered, err)
	}
}

func TestSDKKeys(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	c := sdkClient(t, h)
	keys, err := c.Keys().Get()
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if keys.Current != qstashdev.DefaultCurrentSigningKey || keys.Next != qstashdev.DefaultNextSigningKey {
		t.Fatalf("Get: %+v, want the dev-server defaults", keys)
	}
	rotated, err := c.Keys().Rotate()
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if rotated.Current != qstashdev.DefaultNextSigningKey || rotated.Next == "" ||
		rotated.Next == qstashdev.DefaultNextSigningKey || !strings.HasPrefix(rotated.Next, "sig_") {
		t.Fatalf("Rotate: %+v", rotated)
	}
	if again, _ := c.Keys().Get(); again != rotated {
		t.Fatalf("Get after Rotate: %+v, want %+v", again, rotated)
	}
}

// TestSDKReceiverVerifies checks a real delivery against the SDK's
// verifier, with the URL it was published to.
func TestSDKReceiverVerifies(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)
	url := dst.URL("/hook?x=1")
	if _, err := c.Publish(qstash.PublishOptions{Url: url, Body: `{"hello":"world"}`}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	h.WaitIdle()
	d := dst.Deliveries()[0]
	sig := d.Header.Get("Upstash-Signature")
	r := qstash.NewReceiver(qstashdev.DefaultCurrentSigningKey, qstashdev.DefaultNextSigningKey)
	if err := r.Verify(qstash.VerifyOptions{Signature: sig, Url: url, Body: string(d.Body)}); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// The verifier must be able to fail: another body, URL or key set.
	if err := r.Verify(qstash.VerifyOptions{Signature: sig, Url: url, Body: "tampered"}); err == nil {
		t.Error("Verify accepted a different body")
	}
	if err := r.Verify(qstash.VerifyOptions{Signature: sig, Url: dst.URL("/other"), Body: string(d.Body)}); err == nil {
		t.Error("Verify accepted a different URL")
	}
	if err := qstash.NewReceiver("sig_wrong", "sig_wrong2").Verify(qstash.VerifyOptions{Signature: sig, Url: url, Body: string(d.Body)}); err == nil {
		t.Error("Verify accepted other keys")
	}
}

// originTransport adds an Origin header to every request, as a browser
// page would.
type originTransport struct {
	origin string
	next   http.RoundTripper
}

func (o originTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Origin", o.origin)
	return o.next.RoundTrip(r)
}

// TestSDKAndForgedOrigin checks the origin policy against the SDK: the SDK
// sends no Origin and keeps working; the same calls under a foreign
// Origin are refused and publish nothing.
func TestSDKAndForgedOrigin(t *testing.T) {
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	c := sdkClient(t, h)
	if _, err := c.Publish(qstash.PublishOptions{Url: dst.URL("/sdk"), Body: "ok"}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	h.WaitIdle()

	forged := qstash.NewClientWith(qstash.Options{Url: h.API.URL, Token: qstashdev.DefaultToken,
		Client: &http.Client{Transport: originTransport{origin: "https://evil.example", next: h.API.Client().Transport}}})
	if _, err := forged.Publish(qstash.PublishOptions{Url: dst.URL("/forged"), Body: "no"}); err == nil {
		t.Fatal("Publish under a foreign Origin succeeded")
	}
	if _, err := forged.Keys().Get(); err == nil {
		t.Fatal("Keys under a foreign Origin succeeded")
	}
	h.WaitIdle()
	if got := dst.Deliveries(); len(got) != 1 || got[0].Path != "/sdk" {
		t.Fatalf("deliveries %+v, want only the SDK's own", got)
	}
}
