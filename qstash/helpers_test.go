package qstash_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// Test keys in QStash's format (the local dev server's defaults).
const (
	currentKey  = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r"
	nextKey     = "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs"
	endpointURL = "https://consumer.example.com/qstash/orders"
)

// testNow is the fixed time of every test clock: tokens minted at it stay
// valid however long the tests (or committed fuzz seeds) live.
var testNow = time.Unix(1_900_000_000, 0)

// fixedClock is a core.Clock stopped at a given time.
type fixedClock struct{ now time.Time }

func (c fixedClock) Now() time.Time                      { return c.now }
func (c fixedClock) NewTimer(d time.Duration) core.Timer { return core.SystemClock{}.NewTimer(d) }

// recordingDeduper is a core.Deduper that counts its calls.
type recordingDeduper struct {
	mu    sync.Mutex
	calls int
	done  map[core.DedupeKey]bool
}

func (d *recordingDeduper) Once(ctx context.Context, key core.DedupeKey, effect func(context.Context) error) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.done == nil {
		d.done = make(map[core.DedupeKey]bool)
	}
	if d.done[key] {
		return false, nil
	}
	if err := effect(ctx); err != nil {
		return false, err
	}
	d.done[key] = true
	return true, nil
}

func (d *recordingDeduper) Calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

// effects is a handler that records the events it applied.
type effects struct {
	mu     sync.Mutex
	events []core.Event
	ctxs   []context.Context
	err    error
	panic  any
}

func (h *effects) Handle(ctx context.Context, e core.Event) error {
	if h.panic != nil {
		panic(h.panic)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	h.events = append(h.events, e)
	h.ctxs = append(h.ctxs, ctx)
	return nil
}

func (h *effects) Applied() []core.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]core.Event(nil), h.events...)
}

// testEvent returns a fully populated event.
func testEvent(t testing.TB) core.Event {
	t.Helper()
	e, err := core.NewEvent("order.confirmed", map[string]any{"order": "o-1", "total": 42})
	if err != nil {
		t.Fatal(err)
	}
	e.Source = "shop"
	e.AggregateType = "order"
	e.AggregateID = "o-1"
	e.Sequence = 7
	e.CreatedAt = testNow.Add(-time.Minute).UTC()
	e.Headers = map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "rojo=00f067aa0ba902b7",
		"tenant":      "acme",
	}
	return e
}

// tokenSeq numbers the tokens the tests mint: QStash gives every token a
// unique jti, and a Receiver refuses a jti it has seen.
var tokenSeq atomic.Int64

// claims returns the claims QStash signs for body sent to url at testNow,
// with a jti of their own.
func claims(body []byte, url string) jwt.MapClaims {
	sum := sha256.Sum256(body)
	return jwt.MapClaims{
		"iss":  "Upstash",
		"sub":  url,
		"iat":  testNow.Unix(),
		"nbf":  testNow.Unix(),
		"exp":  testNow.Unix() + 300,
		"jti":  "jwt_test_" + strconv.FormatInt(tokenSeq.Add(1), 10),
		"body": base64.URLEncoding.EncodeToString(sum[:]),
	}
}

// mint signs claims with golang-jwt, an implementation independent of ours.
func mint(t testing.TB, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// deliveryBody is the body QStash delivers for e: the structured-mode
// document the publisher sends by default.
func deliveryBody(t testing.TB, e core.Event) []byte {
	t.Helper()
	b, err := qstash.EncodeStructuredEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deliveryRequest builds the request QStash makes to deliver e in
// structured mode: the CloudEvents document as body, and the delivery
// headers.
func deliveryRequest(e core.Event, token string) *http.Request {
	b, err := qstash.EncodeStructuredEvent(e)
	if err != nil {
		panic(err)
	}
	r := rawDelivery(b, token)
	r.Header.Set("Content-Type", qstash.ContentTypeStructured)
	return r
}

// rawDelivery builds a structured-mode delivery of body, which need not be
// a valid event.
func rawDelivery(body []byte, token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, endpointURL, bytes.NewReader(body))
	r.Header.Set("Content-Type", qstash.ContentTypeStructured)
	if token != "" {
		r.Header.Set("Upstash-Signature", token)
	}
	r.Header.Set("Upstash-Message-Id", "msg_test_1")
	r.Header.Set("Upstash-Retried", "2")
	r.Header.Set("User-Agent", "Upstash-QStash")
	return r
}

// binaryDeliveryRequest builds the request QStash makes to deliver e in
// binary mode: the payload as body, the forwarded CloudEvents headers
// without their prefix, and the delivery headers.
func binaryDeliveryRequest(e core.Event, token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, endpointURL, bytes.NewReader(e.Payload))
	for k, v := range core.CloudEventHeaders(e) {
		r.Header.Set(k, v)
	}
	if token != "" {
		r.Header.Set("Upstash-Signature", token)
	}
	r.Header.Set("Upstash-Message-Id", "msg_test_1")
	r.Header.Set("Upstash-Retried", "2")
	r.Header.Set("User-Agent", "Upstash-QStash")
	return r
}

// signed returns a valid token for e's structured-mode body, signed with
// key.
func signed(t testing.TB, key string, e core.Event) string {
	return signedBody(t, key, deliveryBody(t, e))
}

// signedBody returns a valid token for body, signed with key.
func signedBody(t testing.TB, key string, body []byte) string {
	return mint(t, jwt.SigningMethodHS256, []byte(key), claims(body, endpointURL))
}

// signedBinary returns a valid token for e's binary-mode body (its
// payload), signed with key.
func signedBinary(t testing.TB, key string, e core.Event) string {
	return signedBody(t, key, e.Payload)
}

// newTestReceiver returns a Receiver at testNow with the given handler and
// a recording deduper, and a slice of the decisions it made.
func newTestReceiver(t testing.TB, h core.Handler, d core.Deduper, mutate ...func(*qstash.ReceiverConfig)) (*qstash.Receiver, *[]qstash.Decision) {
	t.Helper()
	var mu sync.Mutex
	var decisions []qstash.Decision
	cfg := &qstash.ReceiverConfig{
		CurrentSigningKey: currentKey,
		NextSigningKey:    nextKey,
		URL:               endpointURL,
		Handler:           h,
		Deduper:           d,
		Consumer:          "billing",
		Clock:             fixedClock{testNow},
		OnDecision: func(_ context.Context, dec qstash.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decisions = append(decisions, dec)
		},
	}
	for _, m := range mutate {
		m(cfg)
	}
	rc, err := qstash.NewReceiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc, &decisions
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
