package qstashsub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/adapters/watermill/qstashsub"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/wmtest"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
	"github.com/outboxkit/outboxkit/tracing"
)

// qstashRig is an in-memory QStash delivering to a Subscriber behind
// a local HTTP endpoint.
type qstashRig struct {
	dev      *qstashdev.Server
	api      *httptest.Server
	endpoint *httptest.Server
	url      string
	sub      *qstashsub.Subscriber

	mu       sync.Mutex
	captured []capturedDelivery // every delivery request, as it arrived
}

// capturedDelivery is a delivery request as it crossed the wire.
type capturedDelivery struct {
	header http.Header
	body   []byte
}

func (r *qstashRig) deliveries() []capturedDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]capturedDelivery(nil), r.captured...)
}

func newQStashRig(t *testing.T, cfg qstashsub.Config) *qstashRig {
	t.Helper()
	// QStash's backoff is 12s for the first retry; a thousandth of it keeps
	// the retry real and the test fast.
	dev, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	r := &qstashRig{dev: dev, api: httptest.NewServer(dev.Handler())}
	mux := http.NewServeMux()
	r.endpoint = httptest.NewServer(mux)
	r.url = r.endpoint.URL + "/qstash/events"
	cfg.CurrentSigningKey = qstashdev.DefaultCurrentSigningKey
	cfg.NextSigningKey = qstashdev.DefaultNextSigningKey
	cfg.URL = r.url
	r.sub, err = qstashsub.New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux.HandleFunc("POST /qstash/events", func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.captured = append(r.captured, capturedDelivery{req.Header.Clone(), body})
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(body))
		r.sub.ServeHTTP(w, req)
	})
	t.Cleanup(func() {
		_ = r.sub.Close()
		_ = dev.Close() // aborts attempts in flight, so the endpoint can shut down
		r.endpoint.Close()
		r.api.Close()
	})
	return r
}

// relay publishes events from an outbox to the rig's endpoint through
// QStash.
func (r *qstashRig) relay(t *testing.T, events ...core.Event) {
	t.Helper()
	store := memory.NewStore(nil)
	if err := store.Add(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     r.api.URL,
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: r.url},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	relay, err := core.NewRelay(store, pub, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Drain(context.Background()); err != nil || n != len(events) {
		t.Fatalf("relayed %d events (%v), want %d", n, err, len(events))
	}
}

// TestQStashSubscriberFeedsARouter: a Watermill Router consumes QStash
// deliveries; its handler fails the first delivery of every event, QStash
// retries, and the retry succeeds and applies the effect once.
func TestQStashSubscriberFeedsARouter(t *testing.T) {
	t.Parallel()
	rig := newQStashRig(t, qstashsub.Config{})

	const n = 5
	events := make([]core.Event, n)
	for i := range events {
		events[i] = core.Event{
			ID: core.NewID(), Type: "order.placed", SchemaVersion: 1, AggregateType: "order",
			AggregateID: fmt.Sprint(i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: map[string]string{"traceparent": wmtest.Traceparent, "tenant": "acme"},
		}
	}

	type attempt struct {
		retried int
		ok      bool
	}
	var (
		mu       sync.Mutex
		attempts = make(map[string][]attempt)
		problems []string
	)
	deduper := memory.NewDeduper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(middleware.Recoverer)
	router.AddConsumerHandler("orders", "order.placed", rig.sub, func(msg *message.Message) error {
		d, ok := qstash.DeliveryFromContext(msg.Context())
		if !ok {
			return errors.New("message context carries no QStash delivery")
		}
		e, err := outboxwatermill.EventFromMessage(msg)
		if err != nil {
			return err
		}
		mu.Lock()
		first := len(attempts[msg.UUID]) == 0
		attempts[msg.UUID] = append(attempts[msg.UUID], attempt{retried: d.Retried, ok: !first})
		if msg.UUID != e.ID.String() || e.Headers["tenant"] != "acme" || msg.Metadata.Get("traceparent") != wmtest.Traceparent {
			problems = append(problems, fmt.Sprintf("message %s: event %+v, metadata %v", msg.UUID, e, msg.Metadata))
		}
		mu.Unlock()
		if first {
			return errors.New("fail once") // Nack: 500, QStash retries
		}
		_, err = deduper.Once(msg.Context(), core.DedupeKey{Consumer: "orders", EventID: e.ID}, func(context.Context) error { return nil })
		return err
	})
	wmtest.RunRouter(t, router)

	rig.relay(t, events...)
	wmtest.WaitFor(t, 30*time.Second, "every event handled successfully after one failure", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			as := attempts[e.ID.String()]
			if len(as) < 2 || !as[len(as)-1].ok {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	for _, e := range events {
		as := attempts[e.ID.String()]
		if as[0].retried != 0 || as[1].retried < 1 {
			t.Errorf("event %s: Upstash-Retried %d then %d, want 0 then at least 1", e.ID, as[0].retried, as[1].retried)
		}
		if !deduper.Seen(core.DedupeKey{Consumer: "orders", EventID: e.ID}) {
			t.Errorf("event %s: effect not recorded", e.ID)
		}
	}
	for id, as := range attempts {
		if _, err := core.ParseID(id); err != nil {
			t.Errorf("unexpected message %s (%d attempts)", id, len(as))
		}
	}
}

// TestQStashSubscriberAnswers checks the HTTP side on its own: Ack → 200,
// Nack → 500, no subscription → 500, bad signature → 401 (with nothing
// handed out).
func TestQStashSubscriberAnswers(t *testing.T) {
	t.Parallel()
	var decisions []qstash.Decision
	var mu sync.Mutex
	rig := newQStashRig(t, qstashsub.Config{
		OnDecision: func(_ context.Context, d qstash.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decisions = append(decisions, d)
		},
	})
	statusOf := func(id core.ID) []int {
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for _, d := range decisions {
			if d.Event.ID == id {
				out = append(out, d.Status)
			}
		}
		return out
	}

	// No subscription yet: 500, so QStash keeps the delivery.
	early := wmtest.Event("", "early")
	rig.relay(t, early)
	wmtest.WaitFor(t, 10*time.Second, "the unsubscribed delivery to be refused", func() bool { return len(statusOf(early.ID)) > 0 })
	if s := statusOf(early.ID)[0]; s != http.StatusInternalServerError {
		t.Errorf("delivery with no subscription answered %d, want 500", s)
	}

	ch, err := rig.sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	e := wmtest.Event("", "t")
	rig.relay(t, e)
	msg := wmtest.Receive(t, ch, 10*time.Second)
	if msg.UUID != e.ID.String() {
		t.Fatalf("UUID %s, want event ID %s", msg.UUID, e.ID)
	}
	msg.Nack()
	wmtest.WaitFor(t, 10*time.Second, "the nack to be answered", func() bool { return len(statusOf(e.ID)) > 0 })
	if s := statusOf(e.ID)[0]; s != http.StatusInternalServerError {
		t.Errorf("nacked delivery answered %d, want 500", s)
	}
	if msg.Context().Err() == nil {
		t.Error("message context still live after Nack")
	}
	retry := wmtest.Receive(t, ch, 10*time.Second) // QStash's retry
	retry.Ack()
	wmtest.WaitFor(t, 10*time.Second, "the ack to be answered", func() bool { return len(statusOf(e.ID)) > 1 })
	if s := statusOf(e.ID)[1]; s != http.StatusOK {
		t.Errorf("acked delivery answered %d, want 200", s)
	}

	// A forged delivery never reaches the channel.
	req, _ := http.NewRequest(http.MethodPost, rig.url, nil)
	req.Header.Set("Upstash-Signature", "forged")
	req.Header.Set("ce-id", core.NewID().String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged delivery answered %d, want 401", resp.StatusCode)
	}
	wmtest.NoMessage(t, ch, "a forged delivery")
}

// TestQStashSubscriberCapturedDeliveryIsNotReplayed: a delivery relayed
// through qstashdev is captured and sent again, three times with a fresh
// ce-id. The subscriber runs no Deduper, so each replay would be a new
// message for the Watermill handler; none may be handed out.
func TestQStashSubscriberCapturedDeliveryIsNotReplayed(t *testing.T) {
	t.Parallel()
	rig := newQStashRig(t, qstashsub.Config{})
	subCtx, stopSub := context.WithCancel(context.Background())
	defer stopSub()
	ch, err := rig.sub.Subscribe(subCtx, "t")
	if err != nil {
		t.Fatal(err)
	}
	e := wmtest.Event("", "t")
	rig.relay(t, e)
	msg := wmtest.Receive(t, ch, 10*time.Second)
	msg.Ack()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rig.dev.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	ds := rig.deliveries()
	if len(ds) != 1 {
		t.Fatalf("%d deliveries, want 1", len(ds))
	}
	// Whatever is handed out from here on is a replay; it is acked so its
	// request completes.
	var replayed []string
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for m := range ch {
			replayed = append(replayed, m.UUID)
			m.Ack()
		}
	}()
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, rig.url, bytes.NewReader(ds[0].body))
		req.Header = ds[0].header.Clone()
		req.Header.Set("Ce-Id", core.NewID().String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("replay answered 200")
		}
	}
	stopSub()
	<-readerDone
	if len(replayed) != 0 {
		t.Fatalf("replayed deliveries were handed out as messages %v", replayed)
	}
}

func TestNewQStashSubscriberValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]*qstashsub.Config{
		"nil":      nil,
		"no keys":  {URL: "https://example.com/q"},
		"no URL":   {CurrentSigningKey: "sig_a", NextSigningKey: "sig_b"},
		"bad next": {CurrentSigningKey: "sig_a", URL: "https://example.com/q"},
	} {
		if _, err := qstashsub.New(cfg); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want core.ErrInvalidConfig", name, err)
		}
	}
}

const endpointURL = "https://consumer.example/qstash"

// signedDelivery builds the request QStash would send for e, in the
// publisher's default structured mode.
func signedDelivery(t *testing.T, ctx context.Context, e core.Event) *http.Request {
	t.Helper()
	body, err := qstash.EncodeStructuredEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	token, err := qstash.Signer{Key: qstashdev.DefaultCurrentSigningKey}.Sign(body, endpointURL)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, endpointURL, bytes.NewReader(body))
	req.Header.Set("Content-Type", qstash.ContentTypeStructured)
	req.Header.Set("Upstash-Signature", token)
	return req
}

// replayOf copies a delivery request, as whoever captured it would send it
// again.
func replayOf(t *testing.T, req *http.Request, body []byte) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, endpointURL, bytes.NewReader(body))
	r.Header = req.Header.Clone()
	return r
}

// TestQStashSubscriberRefusesReplaysAndUnsignedAttributes: the subscriber
// has no Deduper, so a captured delivery sent again with a fresh ce-id
// would be a new message for the Watermill handler. The replay guard
// refuses the token, and the message's UUID and metadata come from the
// signed body, never from ce-* headers.
func TestQStashSubscriberRefusesReplaysAndUnsignedAttributes(t *testing.T) {
	t.Parallel()
	sub := newDirectQStashSubscriber(t, qstashsub.Config{})
	ch, err := sub.Subscribe(context.Background(), "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	e := wmtest.Event("", "order.placed")
	req := signedDelivery(t, context.Background(), e)
	body, _ := qstash.EncodeStructuredEvent(e)
	req.Header.Set("ce-id", core.NewID().String()) // unsigned: ignored
	req.Header.Set("ce-type", "order.refunded")
	req.Header.Set("traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	rec, done := serve(sub, req)
	msg := wmtest.Receive(t, ch, 5*time.Second)
	if msg.UUID != e.ID.String() {
		t.Errorf("message UUID %s from an unsigned header, want the signed event ID %s", msg.UUID, e.ID)
	}
	if got := msg.Metadata.Get("traceparent"); got == "00-11111111111111111111111111111111-2222222222222222-01" {
		t.Errorf("traceparent taken from an unsigned header")
	}
	msg.Ack()
	<-done
	if rec.Code != http.StatusOK {
		t.Fatalf("delivery answered %d, want 200", rec.Code)
	}

	for range 3 {
		r := replayOf(t, req, body)
		r.Header.Set("ce-id", core.NewID().String())
		rec, done := serve(sub, r)
		<-done
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("replay answered %d, want 401", rec.Code)
		}
	}
	wmtest.NoMessage(t, ch, "a replayed delivery")
}

// newDirectQStashSubscriber returns a subscriber for requests signed with
// qstashdev's keys for endpointURL, configured otherwise by cfg.
func newDirectQStashSubscriber(t *testing.T, cfg qstashsub.Config) *qstashsub.Subscriber {
	t.Helper()
	cfg.CurrentSigningKey = qstashdev.DefaultCurrentSigningKey
	cfg.NextSigningKey = qstashdev.DefaultNextSigningKey
	cfg.URL = endpointURL
	sub, err := qstashsub.New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// serve runs one request on its own goroutine and returns its recorder,
// ready once done is closed.
func serve(h http.Handler, req *http.Request) (*httptest.ResponseRecorder, <-chan struct{}) {
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	return rec, done
}

func TestQStashSubscriberHonoursRequestContext(t *testing.T) {
	t.Parallel()
	sub := newDirectQStashSubscriber(t, qstashsub.Config{})
	ch, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec, done := serve(sub, signedDelivery(t, ctx, wmtest.Event("", "t")))
	msg := wmtest.Receive(t, ch, 5*time.Second)
	cancel() // QStash gave up on the attempt (its timeout)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the delivery outlived its request")
	}
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", rec.Code)
	}
	if msg.Context().Err() == nil {
		t.Error("message context live after its request ended")
	}
}

// TestQStashSubscriberContinuesTheTrace: with ContextFor set to
// tracing.NewExtractor, the message's Context continues the trace the
// signed event carries, and keeps the request's values; without it, the
// trace context is in the metadata only.
func TestQStashSubscriberContinuesTheTrace(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]qstashsub.Config{
		"ContextFor":    {ContextFor: tracing.NewExtractor(tracing.WithPropagators(propagation.TraceContext{}))},
		"no ContextFor": {},
	} {
		sub := newDirectQStashSubscriber(t, cfg)
		ch, err := sub.Subscribe(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		e := wmtest.Event("", "t")
		e.Headers = map[string]string{"traceparent": wmtest.Traceparent}
		ctx := context.WithValue(context.Background(), ctxKey{}, "v")
		rec, done := serve(sub, signedDelivery(t, ctx, e))
		msg := wmtest.Receive(t, ch, 5*time.Second)
		sc := trace.SpanContextFromContext(msg.Context())
		if want := cfg.ContextFor != nil; sc.IsValid() != want ||
			(want && (sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !sc.IsRemote())) {
			t.Errorf("%s: message context span %v; want the traceparent's remote parent: %v", name, sc, want)
		}
		if msg.Metadata.Get("traceparent") != wmtest.Traceparent {
			t.Errorf("%s: traceparent metadata %q", name, msg.Metadata.Get("traceparent"))
		}
		if msg.Context().Value(ctxKey{}) != "v" {
			t.Errorf("%s: message context lost the request context's values", name)
		}
		msg.Ack()
		<-done
		if rec.Code != http.StatusOK {
			t.Errorf("%s: delivery answered %d, want 200", name, rec.Code)
		}
	}
}

type ctxKey struct{}

func TestQStashSubscriberCloseLetsInFlightFinish(t *testing.T) {
	t.Parallel()
	sub := newDirectQStashSubscriber(t, qstashsub.Config{CloseTimeout: 10 * time.Second})
	ch, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	rec, done := serve(sub, signedDelivery(t, context.Background(), wmtest.Event("", "t")))
	msg := wmtest.Receive(t, ch, 5*time.Second)
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	// Close ends the subscription (its channel closes) but the delivery in
	// flight waits for its ack.
	select {
	case _, open := <-ch:
		if open {
			t.Fatal("message after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed by Close")
	}
	msg.Ack()
	<-done
	if rec.Code != http.StatusOK {
		t.Errorf("in-flight delivery acked during Close answered %d, want 200", rec.Code)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	rec, done = serve(sub, signedDelivery(t, context.Background(), wmtest.Event("", "t")))
	<-done
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("delivery after Close answered %d, want 500 so QStash retries", rec.Code)
	}
}

// TestQStashSubscriberLogsRefusalsByDefault: with no Logger configured, a
// forged delivery is logged through slog.Default at Warn, without its token.
// Not parallel: it replaces the process's default logger.
func TestQStashSubscriberLogsRefusalsByDefault(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, string(p))
		return len(p), nil
	}), &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	sub := newDirectQStashSubscriber(t, qstashsub.Config{})
	req := signedDelivery(t, context.Background(), wmtest.Event("", "t"))
	const forged = "eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJVcHN0YXNoIn0.Zm9yZ2VkLXNpZ25hdHVyZS1mb3JnZWQtc2lnbmF0dXJlLWZvcmdl"
	req.Header.Set("Upstash-Signature", forged)
	rec, done := serve(sub, req)
	<-done
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("forged delivery answered %d, want 401", rec.Code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "unauthorized") {
		t.Fatalf("log lines %q, want one WARN line saying the delivery was unauthorized", lines)
	}
	if strings.Contains(lines[0], forged) || strings.Contains(lines[0], "Zm9yZ2Vk") {
		t.Errorf("the token is in the log: %s", lines[0])
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
