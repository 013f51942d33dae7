package qstash_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// devEnv is a qstashdev server, a Receiver listening on 127.0.0.1 and a
// Publisher pointed at the server.
type devEnv struct {
	dev     *qstashdev.Server
	url     string // the receiver's public URL
	handler *countingHandler
	deduper *recordingDeduper
	pub     *qstash.Publisher
	// onRequest, when set, sees each delivery request before the receiver.
	onRequest atomic.Pointer[func(r *http.Request, body []byte)]
}

// countingHandler applies events and fails as told, recording deliveries.
type countingHandler struct {
	mu         sync.Mutex
	applied    map[core.ID]int
	deliveries []qstash.Delivery
	fail       func(e core.Event, d qstash.Delivery) error
}

func (h *countingHandler) Handle(ctx context.Context, e core.Event) error {
	d, _ := qstash.DeliveryFromContext(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries = append(h.deliveries, d)
	if h.fail != nil {
		if err := h.fail(e, d); err != nil {
			return err
		}
	}
	if h.applied == nil {
		h.applied = make(map[core.ID]int)
	}
	h.applied[e.ID]++
	return nil
}

func (h *countingHandler) snapshot() (map[core.ID]int, []qstash.Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[core.ID]int, len(h.applied))
	for k, v := range h.applied {
		m[k] = v
	}
	return m, append([]qstash.Delivery(nil), h.deliveries...)
}

func newDevEnv(t testing.TB, devCfg qstashdev.Config, pubCfg func(*qstash.PublisherConfig), recvCfg func(*qstash.ReceiverConfig)) *devEnv {
	t.Helper()
	if devCfg.BackoffScale == 0 {
		devCfg.BackoffScale = 0.0001 // 12s becomes 1.2ms
	}
	dev, err := qstashdev.New(devCfg)
	if err != nil {
		t.Fatal(err)
	}
	devSrv := httptest.NewServer(dev.Handler())
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		devSrv.Close()
	})

	// The URL is the signature's subject, so it must be known before the
	// receiver exists: listen first, serve later.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := &devEnv{dev: dev, url: "http://" + ln.Addr().String() + "/hooks/orders", handler: &countingHandler{}, deduper: &recordingDeduper{}}
	rcfg := &qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               env.url,
		Handler:           env.handler,
		Deduper:           env.deduper,
		Consumer:          "billing",
	}
	if recvCfg != nil {
		recvCfg(rcfg)
	}
	rc, err := qstash.NewReceiver(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	recvSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook := env.onRequest.Load(); hook != nil {
			body, _ := io.ReadAll(r.Body)
			(*hook)(r, body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rc.ServeHTTP(w, r)
	}))
	recvSrv.Listener.Close()
	recvSrv.Listener = ln
	recvSrv.Start()
	t.Cleanup(recvSrv.Close)

	pcfg := &qstash.PublisherConfig{BaseURL: devSrv.URL, Token: qstashdev.DefaultToken, Destination: qstash.Target{URL: env.url}}
	if pubCfg != nil {
		pubCfg(pcfg)
	}
	env.pub, err = qstash.NewPublisher(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.pub.Close() })
	return env
}

func (env *devEnv) waitIdle(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := env.dev.WaitIdle(ctx); err != nil {
		t.Fatalf("waiting for qstashdev to deliver everything: %v", err)
	}
}

func TestQStashDevEndToEnd(t *testing.T) {
	t.Parallel()
	env := newDevEnv(t, qstashdev.Config{}, func(c *qstash.PublisherConfig) {
		c.FlowControl = &qstash.FlowControl{Parallelism: 1}
		retries := 2
		c.Retries = &retries
	}, nil)
	ctx := context.Background()
	evs := events(t, 50)
	if err := env.pub.Publish(ctx, evs); err != nil {
		t.Fatalf("batch Publish: %v", err)
	}
	one := testEvent(t)
	if err := env.pub.Publish(ctx, []core.Event{one}); err != nil {
		t.Fatalf("single Publish: %v", err)
	}
	env.waitIdle(t)
	if dlq := env.dev.DLQ(); len(dlq) != 0 {
		t.Fatalf("deliveries failed into the DLQ: %+v", dlq[0])
	}
	applied, deliveries := env.handler.snapshot()
	if len(applied) != 51 {
		t.Fatalf("%d events applied, want 51", len(applied))
	}
	for _, e := range append(evs, one) {
		if applied[e.ID] != 1 {
			t.Errorf("event %s applied %d times", e.ID, applied[e.ID])
		}
	}
	for _, d := range deliveries {
		if d.MessageID == "" || d.Retried != 0 {
			t.Errorf("delivery %+v: want a message ID and no retry", d)
		}
	}

	// Publishing the same events again (a relay that crashed before
	// settling) is accepted and deduplicated by QStash on the event ID.
	if err := env.pub.Publish(ctx, evs); err != nil {
		t.Fatalf("republish: %v", err)
	}
	env.waitIdle(t)
	if applied, _ := env.handler.snapshot(); len(applied) != 51 {
		t.Fatalf("%d events applied after a republish, want still 51", len(applied))
	}
	for _, e := range evs {
		if applied[e.ID] != 1 {
			t.Errorf("event %s applied %d times after a republish", e.ID, applied[e.ID])
		}
	}
}

func TestQStashDevPermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	env := newDevEnv(t, qstashdev.Config{}, nil, nil)
	env.handler.fail = func(core.Event, qstash.Delivery) error { return core.Permanent(errors.New("order does not exist")) }
	e := testEvent(t)
	if err := env.pub.Publish(context.Background(), []core.Event{e}); err != nil {
		t.Fatal(err)
	}
	env.waitIdle(t)
	dlq := env.dev.DLQ()
	if len(dlq) != 1 || dlq[0].ResponseStatus != qstash.StatusNonRetryable {
		t.Fatalf("DLQ = %+v, want one entry with status 489", dlq)
	}
	if _, deliveries := env.handler.snapshot(); len(deliveries) != 1 {
		t.Fatalf("%d attempts, want 1: 489 must stop the retries", len(deliveries))
	}
}

func TestQStashDevTransientErrorIsRetried(t *testing.T) {
	t.Parallel()
	env := newDevEnv(t, qstashdev.Config{}, nil, nil)
	env.handler.fail = func(_ core.Event, d qstash.Delivery) error {
		if d.Retried < 2 {
			return errors.New("database unavailable")
		}
		return nil
	}
	e := testEvent(t)
	if err := env.pub.Publish(context.Background(), []core.Event{e}); err != nil {
		t.Fatal(err)
	}
	env.waitIdle(t)
	applied, deliveries := env.handler.snapshot()
	if applied[e.ID] != 1 || len(env.dev.DLQ()) != 0 {
		t.Fatalf("applied %d times, DLQ %v; want once, empty", applied[e.ID], env.dev.DLQ())
	}
	var retried []int
	for _, d := range deliveries {
		retried = append(retried, d.Retried)
	}
	if len(retried) != 3 || retried[0] != 0 || retried[1] != 1 || retried[2] != 2 {
		t.Fatalf("Upstash-Retried seen by the handler: %v, want [0 1 2]", retried)
	}
	if env.deduper.Calls() != 3 {
		t.Errorf("deduper called %d times, want 3 (failed attempts record nothing)", env.deduper.Calls())
	}
}

func TestQStashDevRateLimitCarriesReset(t *testing.T) {
	t.Parallel()
	// The publisher's clock is pinned, so the hint is exact however slowly
	// the test runs.
	now := time.Unix(time.Now().Unix(), 0)
	reset := now.Add(30 * time.Second)
	env := newDevEnv(t, qstashdev.Config{
		Reject: func(*http.Request) *qstashdev.Rejection { return qstashdev.BurstRateLimited(100, reset) },
	}, func(c *qstash.PublisherConfig) { c.Clock = fixedClock{now} }, nil)
	for _, n := range []int{1, 5} {
		err := env.pub.Publish(context.Background(), events(t, n))
		hint, ok := core.RetryAfterHint(err)
		if !ok || hint != 30*time.Second || core.IsPermanent(err) {
			t.Fatalf("%d events: Publish = %v (hint %v, %v); want transient with a 30s hint", n, err, hint, ok)
		}
	}
}

func TestQStashDevKeyRotation(t *testing.T) {
	t.Parallel()
	env := newDevEnv(t, qstashdev.Config{}, func(c *qstash.PublisherConfig) {
		zero := 0
		c.Retries = &zero
	}, nil)
	ctx := context.Background()
	publish := func() core.Event {
		e := testEvent(t)
		if err := env.pub.Publish(ctx, []core.Event{e}); err != nil {
			t.Fatal(err)
		}
		env.waitIdle(t)
		return e
	}
	before := publish()
	env.dev.RotateKeys() // signs with the old next key now
	during := publish()
	if applied, _ := env.handler.snapshot(); applied[before.ID] != 1 || applied[during.ID] != 1 {
		t.Fatalf("applied %v: deliveries signed with the next key must verify", applied)
	}
	env.dev.RotateKeys() // a key this receiver was never given
	after := publish()
	if applied, _ := env.handler.snapshot(); applied[after.ID] != 0 {
		t.Fatal("a delivery signed with an unknown key was applied")
	}
	if dlq := env.dev.DLQ(); len(dlq) != 1 || dlq[0].ResponseStatus != http.StatusUnauthorized {
		t.Fatalf("DLQ = %+v, want the unknown-key delivery refused with 401", dlq)
	}
}

func TestQStashDevWrongSubjectRefused(t *testing.T) {
	t.Parallel()
	var env *devEnv
	env = newDevEnv(t, qstashdev.Config{}, func(c *qstash.PublisherConfig) {
		zero := 0
		c.Retries = &zero
		// The same endpoint under another URL: the token's sub differs
		// from the URL the receiver was configured with.
		c.Destination = qstash.Target{URL: strings.Replace(c.Destination.URL, "/hooks/orders", "/hooks/orders?via=proxy", 1)}
	}, nil)
	if err := env.pub.Publish(context.Background(), []core.Event{testEvent(t)}); err != nil {
		t.Fatal(err)
	}
	env.waitIdle(t)
	if _, deliveries := env.handler.snapshot(); len(deliveries) != 0 {
		t.Fatal("a delivery for another URL reached the handler")
	}
	if dlq := env.dev.DLQ(); len(dlq) != 1 || dlq[0].ResponseStatus != http.StatusUnauthorized {
		t.Fatalf("DLQ = %+v, want one 401", dlq)
	}
}

func TestQStashDevRecordsMessageOptions(t *testing.T) {
	t.Parallel()
	env := newDevEnv(t, qstashdev.Config{}, func(c *qstash.PublisherConfig) {
		retries := 4
		c.Retries = &retries
		c.RetryDelay = "1000 * retried"
		c.Timeout = 20 * time.Second
		c.Label = "orders"
		c.FlowControl = &qstash.FlowControl{Parallelism: 2, Rate: 5, Period: time.Minute}
		c.Destination.Queue = "orders-fifo"
	}, nil)
	evs := events(t, 2)
	at := time.Now().Add(time.Hour)
	for i := range evs {
		evs[i].AvailableAt = at
	}
	if err := env.pub.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	msgs := env.dev.Messages()
	if len(msgs) != 2 {
		t.Fatalf("%d messages pending, want 2 scheduled for later", len(msgs))
	}
	for _, m := range msgs {
		if m.URL != env.url || m.Queue != "orders-fifo" || m.MaxRetries != 4 || m.RetryDelay != "1000 * retried" ||
			m.Timeout != 20*time.Second || m.Label != "orders" || !strings.HasPrefix(m.FlowControlKey, "order/o-") ||
			m.Parallelism != 2 || m.Rate != 5 || m.Period != time.Minute {
			t.Errorf("message options not as published: %+v", m)
		}
		if m.NotBefore.Before(at) || m.NotBefore.After(at.Add(time.Second)) {
			t.Errorf("NotBefore = %s, want AvailableAt %s rounded up to the second", m.NotBefore, at)
		}
		if got, err := qstash.DecodeStructuredEvent(m.Body); err != nil || got.Type != "order.confirmed" || m.Header.Get("Content-Type") != qstash.ContentTypeStructured {
			t.Errorf("message body decodes to %+v, %v (Content-Type %q); want the structured-mode event", got, err, m.Header.Get("Content-Type"))
		}
		if !env.dev.Cancel(m.ID) {
			t.Errorf("cancel %s failed", m.ID)
		}
	}
	env.waitIdle(t)
}
