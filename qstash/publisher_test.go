package qstash_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

const testToken = "test-token"

// recorded is one request the fake QStash received.
type recorded struct {
	Method     string
	RequestURI string
	Header     http.Header
	Body       []byte
}

// batchElement is one message of a recorded /v2/batch request.
type batchElement struct {
	Destination string            `json:"destination"`
	Headers     map[string]string `json:"headers"`
	Body        string            `json:"body"`
	Queue       *string           `json:"queue"`
}

func (r recorded) batch(t *testing.T) []batchElement {
	t.Helper()
	var els []batchElement
	if err := json.Unmarshal(r.Body, &els); err != nil {
		t.Fatalf("batch body is not a JSON array of messages: %v\n%s", err, r.Body)
	}
	return els
}

// fakeQStash records requests and answers them with respond (by default
// a messageId per message).
type fakeQStash struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []recorded
	conns   atomic.Int32
	respond func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newFakeQStash(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, body []byte)) *fakeQStash {
	t.Helper()
	f := &fakeQStash{respond: respond}
	if f.respond == nil {
		f.respond = answerOK
	}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.RequestURI, r.Header.Clone(), body})
		f.mu.Unlock()
		f.respond(w, r, body)
	}))
	f.Server.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeQStash) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// answerOK answers like QStash: a messageId for a publish, an aligned array
// of them for a batch.
func answerOK(w http.ResponseWriter, r *http.Request, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/v2/batch" {
		fmt.Fprint(w, `{"messageId":"msg_1"}`)
		return
	}
	var els []json.RawMessage
	if err := json.Unmarshal(body, &els); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":%q}`, err.Error())
		return
	}
	out := make([]string, len(els))
	for i := range els {
		out[i] = fmt.Sprintf(`{"messageId":"msg_%d"}`, i)
	}
	fmt.Fprint(w, "["+strings.Join(out, ",")+"]")
}

func answer(status int, header map[string]string, body string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

// newTestPublisher returns a publisher pointed at f, with testNow as its
// clock, and closes its connections at the end of the test.
func newTestPublisher(t *testing.T, f *fakeQStash, mutate ...func(*qstash.PublisherConfig)) *qstash.Publisher {
	t.Helper()
	cfg := &qstash.PublisherConfig{
		BaseURL:     f.URL,
		Token:       testToken,
		Destination: qstash.Target{URL: endpointURL},
		Clock:       fixedClock{testNow},
	}
	for _, m := range mutate {
		m(cfg)
	}
	p, err := qstash.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func events(t *testing.T, n int) []core.Event {
	out := make([]core.Event, n)
	for i := range out {
		e := testEvent(t)
		e.AggregateID = "o-" + strconv.Itoa(i)
		e.Payload = []byte(fmt.Sprintf(`{"order":"o-%d","note":"quote \" backslash \\ tab \t é 😀 \u2028"}`, i))
		out[i] = e
	}
	return out
}

func TestPublishBatchEncoding(t *testing.T) {
	t.Parallel()
	for _, mode := range []qstash.ContentMode{qstash.StructuredMode, qstash.BinaryMode} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testPublishBatchEncoding(t, mode)
		})
	}
}

func testPublishBatchEncoding(t *testing.T, mode qstash.ContentMode) {
	f := newFakeQStash(t, nil)
	retries := 5
	p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) {
		c.ContentMode = mode
		c.Retries = &retries
		c.RetryDelay = "pow(2, retried) * 1000"
		c.Timeout = 30 * time.Second
		c.Delay = 90 * time.Second
		c.Callback = "https://consumer.example.com/cb"
		c.FailureCallback = "https://consumer.example.com/failed"
		c.Label = "orders"
		c.FlowControl = &qstash.FlowControl{Parallelism: 1, Rate: 10, Period: time.Minute}
	})
	evs := events(t, 3)
	evs[1].AvailableAt = testNow.Add(90*time.Second + 300*time.Millisecond) // → Not-Before, rounded up
	evs[2].AggregateID = ""                                                 // → no flow control
	if err := p.Publish(context.Background(), evs); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].Method != http.MethodPost || reqs[0].RequestURI != "/v2/batch" {
		t.Fatalf("requests = %+v, want one POST /v2/batch", reqs)
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+testToken {
		t.Errorf("Authorization = %q", got)
	}
	if got := reqs[0].Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	els := reqs[0].batch(t)
	if len(els) != 3 {
		t.Fatalf("%d messages in the batch, want 3", len(els))
	}
	for i, el := range els {
		e := evs[i]
		if el.Destination != endpointURL || el.Queue != nil {
			t.Errorf("message %d: destination %q, queue %v", i, el.Destination, el.Queue)
		}
		want := map[string]string{
			"Content-Type":               qstash.ContentTypeStructured,
			"Upstash-Deduplication-Id":   e.ID.String(),
			"Upstash-Retries":            "5",
			"Upstash-Retry-Delay":        "pow(2, retried) * 1000",
			"Upstash-Timeout":            "30s",
			"Upstash-Callback":           "https://consumer.example.com/cb",
			"Upstash-Failure-Callback":   "https://consumer.example.com/failed",
			"Upstash-Label":              "orders",
			"Upstash-Delay":              "1m30s",
			"Upstash-Flow-Control-Key":   "order/" + e.AggregateID,
			"Upstash-Flow-Control-Value": "parallelism=1, rate=10, period=1m",
		}
		if mode == qstash.BinaryMode {
			want["Content-Type"] = "application/json"
			for k, v := range core.CloudEventHeaders(e) {
				if k != "content-type" {
					want["Upstash-Forward-"+k] = v
				}
			}
		}
		switch i {
		case 1:
			delete(want, "Upstash-Delay")
			want["Upstash-Not-Before"] = strconv.FormatInt(testNow.Unix()+91, 10)
		case 2:
			delete(want, "Upstash-Flow-Control-Key")
			delete(want, "Upstash-Flow-Control-Value")
			delete(want, "Upstash-Forward-ce-subject")
		}
		if !mapsEqual(el.Headers, want) {
			t.Errorf("message %d headers:\n got  %v\n want %v", i, el.Headers, want)
		}

		// What QStash delivers (the body, and forwarded headers without
		// their prefix) decodes back into the same event.
		var got core.Event
		var err error
		if mode == qstash.StructuredMode {
			got, err = qstash.DecodeStructuredEvent([]byte(el.Body))
		} else {
			if el.Body != string(e.Payload) {
				t.Errorf("message %d: body %q, want the payload unchanged %q", i, el.Body, e.Payload)
			}
			h := http.Header{}
			for k, v := range el.Headers {
				if name, ok := strings.CutPrefix(k, "Upstash-Forward-"); ok {
					h.Set(name, v)
				}
			}
			got, err = qstash.DecodeEvent(h, []byte(el.Body))
		}
		if err != nil {
			t.Fatalf("message %d does not decode: %v", i, err)
		}
		if got.ID != e.ID || got.Type != e.Type || got.AggregateID != e.AggregateID || got.Sequence != e.Sequence ||
			string(got.Payload) != string(e.Payload) || got.Headers["tenant"] != "acme" || got.Headers["traceparent"] != e.Headers["traceparent"] {
			t.Errorf("message %d decodes to %+v, want %+v", i, got, e)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestPublishSingleEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		target  qstash.Target
		wantURI string
	}{
		{"url", qstash.Target{URL: endpointURL + "?tenant=acme"}, "/v2/publish/" + endpointURL + "?tenant=acme"},
		{"group", qstash.Target{URLGroup: "orders"}, "/v2/publish/orders"},
		{"queue", qstash.Target{URL: endpointURL, Queue: "orders-fifo"}, "/v2/enqueue/orders-fifo/" + endpointURL},
	} {
		for _, mode := range []qstash.ContentMode{qstash.StructuredMode, qstash.BinaryMode} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				f := newFakeQStash(t, nil)
				p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) { c.Destination = tc.target; c.ContentMode = mode })
				e := testEvent(t)
				if err := p.Publish(context.Background(), []core.Event{e}); err != nil {
					t.Fatalf("Publish: %v", err)
				}
				reqs := f.requests()
				if len(reqs) != 1 || reqs[0].RequestURI != tc.wantURI {
					t.Fatalf("requests = %+v, want one to %s", reqs, tc.wantURI)
				}
				r := reqs[0]
				if r.Header.Get("Upstash-Deduplication-Id") != e.ID.String() || r.Header.Get("Authorization") != "Bearer "+testToken {
					t.Errorf("headers %v", r.Header)
				}
				if mode == qstash.StructuredMode {
					if string(r.Body) != string(deliveryBody(t, e)) || r.Header.Get("Content-Type") != qstash.ContentTypeStructured {
						t.Errorf("body %q (Content-Type %q), want the structured-mode document", r.Body, r.Header.Get("Content-Type"))
					}
					for k := range r.Header {
						if strings.HasPrefix(k, "Upstash-Forward-") {
							t.Errorf("%s forwarded in structured mode: attributes belong in the signed body only", k)
						}
					}
					return
				}
				if string(r.Body) != string(e.Payload) || r.Header.Get("Content-Type") != "application/json" {
					t.Errorf("body %q (Content-Type %q), want the payload", r.Body, r.Header.Get("Content-Type"))
				}
				for k, v := range core.CloudEventHeaders(e) {
					if k == "content-type" {
						continue
					}
					if got := r.Header.Get("Upstash-Forward-" + k); got != v {
						t.Errorf("Upstash-Forward-%s = %q, want %q", k, got, v)
					}
					if r.Header.Get(k) != "" {
						t.Errorf("%s sent without the forward prefix: QStash would not deliver it", k)
					}
				}
			})
		}
	}
}

func TestPublishBatchPartialFailure(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, answer(200, nil, `[{"messageId":"a"},{"error":"message body is larger than 1048576 bytes"},[{"messageId":"c1","url":"x"},{"messageId":"c2","url":"y"}],{"messageId":"d","deduplicated":true}]`))
	p := newTestPublisher(t, f)
	evs := events(t, 4)
	err := p.Publish(context.Background(), evs)
	var be *core.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 4 {
		t.Fatalf("Publish = %v, want a *core.BatchError for 4 events", err)
	}
	errs := core.EventErrors(4, err)
	for i, e := range errs {
		if (e != nil) != (i == 1) {
			t.Errorf("event %d: err = %v", i, e)
		}
	}
	var apiErr *qstash.APIError
	if !errors.As(errs[1], &apiErr) || apiErr.Message != "message body is larger than 1048576 bytes" || apiErr.Index != 1 || !core.IsPermanent(errs[1]) {
		t.Errorf("event 1: %v, want a permanent *APIError at index 1", errs[1])
	}
}

func TestPublishBatchAnswerNotAligned(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, answer(200, nil, `[{"messageId":"a"}]`))
	p := newTestPublisher(t, f)
	err := p.Publish(context.Background(), events(t, 2))
	if !errors.Is(err, qstash.ErrUnexpectedResponse) || core.IsPermanent(err) {
		t.Fatalf("Publish = %v, want a transient ErrUnexpectedResponse", err)
	}
}

func TestPublishErrorClassification(t *testing.T) {
	t.Parallel()
	resetAt := strconv.FormatInt(testNow.Add(30*time.Second).Unix(), 10)
	for _, tc := range []struct {
		name          string
		respond       func(http.ResponseWriter, *http.Request, []byte)
		wantStatus    int
		wantPermanent bool
		wantHint      time.Duration
		wantMessage   string
	}{
		// A bad destination, token or queue is the operator's to fix: events
		// stay pending (and the oldest-pending-age alert fires) instead of
		// all being dead-lettered (TestPublishConfigurationErrorsStayPending).
		{"400", answer(400, nil, `{"error":"invalid destination url"}`), 400, false, 0, "invalid destination url"},
		{"401 with a non-JSON body", answer(401, nil, "Unauthorized\n"), 401, false, 0, "Unauthorized"},
		{"403", answer(403, nil, `{"error":"forbidden"}`), 403, false, 0, "forbidden"},
		{"412 queue limit", answer(412, nil, `{"error":"queue limit reached"}`), 412, false, 0, "queue limit reached"},
		{"404", answer(404, nil, `{"error":"queue not found"}`), 404, false, 0, "queue not found"},
		{"429 daily quota", answer(429, map[string]string{"RateLimit-Limit": "500", "RateLimit-Remaining": "0", "RateLimit-Reset": resetAt}, `{"error":"daily quota exceeded"}`), 429, false, 30 * time.Second, "daily quota exceeded"},
		{"429 burst", answer(429, map[string]string{"Burst-RateLimit-Remaining": "0", "Burst-RateLimit-Reset": resetAt, "RateLimit-Remaining": "400", "RateLimit-Reset": "9999999999"}, `{"error":"too many requests"}`), 429, false, 30 * time.Second, "too many requests"},
		{"429 Retry-After", answer(429, map[string]string{"Retry-After": "7"}, ``), 429, false, 7 * time.Second, ""},
		{"429 without a hint", answer(429, nil, `{"error":"slow down"}`), 429, false, 0, "slow down"},
		{"500", answer(500, nil, `{"error":"internal"}`), 500, false, 0, "internal"},
		{"503 HTML", answer(503, map[string]string{"Retry-After": "2"}, "<html>Service Unavailable</html>"), 503, false, 2 * time.Second, "<html>Service Unavailable</html>"},
		{"307 not followed", answer(307, map[string]string{"Location": "https://elsewhere.example.com/"}, ""), 307, false, 0, ""},
	} {
		for _, n := range []int{1, 3} { // single publish and batch
			t.Run(fmt.Sprintf("%s/%d events", tc.name, n), func(t *testing.T) {
				t.Parallel()
				f := newFakeQStash(t, tc.respond)
				p := newTestPublisher(t, f)
				err := p.Publish(context.Background(), events(t, n))
				var apiErr *qstash.APIError
				if !errors.As(err, &apiErr) {
					t.Fatalf("Publish = %v, want an *APIError", err)
				}
				if apiErr.StatusCode != tc.wantStatus || apiErr.Message != tc.wantMessage || apiErr.Index != -1 {
					t.Errorf("APIError = %+v, want status %d, message %q", apiErr, tc.wantStatus, tc.wantMessage)
				}
				if core.IsPermanent(err) != tc.wantPermanent {
					t.Errorf("IsPermanent = %v, want %v", core.IsPermanent(err), tc.wantPermanent)
				}
				hint, ok := core.RetryAfterHint(err)
				if ok != (tc.wantHint > 0) || hint != tc.wantHint {
					t.Errorf("RetryAfterHint = %v, %v; want %v", hint, ok, tc.wantHint)
				}
				for i, e := range core.EventErrors(n, err) {
					if e == nil {
						t.Errorf("event %d reported as published", i)
					}
				}
				if got := len(f.requests()); got != 1 {
					t.Errorf("%d requests, want 1 (no retries, no redirects followed)", got)
				}
			})
		}
	}
}

func TestPublishReusesConnections(t *testing.T) {
	t.Parallel()
	// Error bodies larger than what is kept for the message, and success
	// bodies nobody reads: both must be drained and closed for the
	// connection to go back to the pool.
	var n atomic.Int32
	f := newFakeQStash(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if n.Add(1)%2 == 0 {
			answerOK(w, r, body)
			return
		}
		answer(400, nil, `{"error":"`+strings.Repeat("x", 100<<10)+`"}`)(w, r, body)
	})
	p := newTestPublisher(t, f)
	for i := range 10 {
		err := p.Publish(context.Background(), events(t, 1+i%2))
		if (err == nil) != (i%2 == 1) {
			t.Fatalf("request %d: Publish = %v", i, err)
		}
	}
	if got := f.conns.Load(); got != 1 {
		t.Fatalf("%d connections for 10 sequential requests, want 1: response bodies are not drained and closed", got)
	}
}

func TestPublishNetworkErrorIsTransient(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, nil)
	p := newTestPublisher(t, f)
	f.Close() // nothing listens any more
	err := p.Publish(context.Background(), events(t, 2))
	if err == nil || core.IsPermanent(err) {
		t.Fatalf("Publish = %v, want a transient error", err)
	}
	var apiErr *qstash.APIError
	if errors.As(err, &apiErr) {
		t.Errorf("a network error reported as an API answer: %v", err)
	}
}

func TestPublishHonoursContext(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	defer close(release)
	f := newFakeQStash(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	p := newTestPublisher(t, f)
	for _, n := range []int{1, 3} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Publish(ctx, events(t, n)) }()
		<-arrived
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || core.IsPermanent(err) {
				t.Errorf("%d events: Publish = %v, want a transient context.Canceled", n, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d events: Publish still running 5s after its context was cancelled", n)
		}
	}

	// An already-cancelled context sends nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := len(f.requests())
	if err := p.Publish(ctx, events(t, 3)); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish(cancelled ctx) = %v", err)
	}
	if len(f.requests()) != before {
		t.Errorf("a request was sent with a cancelled context")
	}
}

func TestPublishRouting(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, nil)
	p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) {
		c.Destination = qstash.Target{URL: "https://default.example.com/events"}
		c.Routes = map[string]qstash.Target{
			"order.confirmed": {URL: "https://billing.example.com/qstash"},
			"order.shipped":   {URLGroup: "shipping"},
			"order.paid":      {URL: "https://ledger.example.com/qstash", Queue: "ledger"},
		}
	})
	mk := func(typ, dest string) core.Event {
		e := testEvent(t)
		e.ID = core.NewID()
		e.Type = typ
		e.Destination = dest
		return e
	}
	evs := []core.Event{
		mk("order.confirmed", ""),
		mk("order.shipped", ""),
		mk("order.paid", ""),
		mk("order.refunded", ""),                            // → Destination
		mk("order.paid", "https://override.example.com/in"), // URL override keeps the queue
		mk("order.confirmed", "audit-group"),                // group override
		mk("order.confirmed", "https://bad.example.com/#frag"),
	}
	err := p.Publish(context.Background(), evs)
	errs := core.EventErrors(len(evs), err)
	for i, e := range errs[:6] {
		if e != nil {
			t.Errorf("event %d: %v", i, e)
		}
	}
	if !core.IsPermanent(errs[6]) {
		t.Errorf("invalid Event.Destination: err = %v, want permanent", errs[6])
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want one batch", len(reqs))
	}
	type dq struct{ dest, queue string }
	want := []dq{
		{"https://billing.example.com/qstash", ""},
		{"shipping", ""},
		{"https://ledger.example.com/qstash", "ledger"},
		{"https://default.example.com/events", ""},
		{"https://override.example.com/in", "ledger"},
		{"audit-group", ""},
	}
	els := reqs[0].batch(t)
	if len(els) != len(want) {
		t.Fatalf("%d messages, want %d", len(els), len(want))
	}
	for i, el := range els {
		q := ""
		if el.Queue != nil {
			q = *el.Queue
		}
		if (dq{el.Destination, q}) != want[i] {
			t.Errorf("message %d: %q in queue %q, want %+v", i, el.Destination, q, want[i])
		}
	}
}

func TestPublishRouteFunc(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, nil)
	errNoTenant := errors.New("no tenant")
	p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) {
		c.Destination = qstash.Target{}
		c.Route = func(e core.Event) (qstash.Target, error) {
			switch e.Headers["tenant"] {
			case "":
				return qstash.Target{}, core.Permanent(errNoTenant)
			case "bad":
				return qstash.Target{URL: "ftp://nope"}, nil
			}
			return qstash.Target{URL: "https://" + e.Headers["tenant"] + ".example.com/events", Queue: e.AggregateKey()[:5]}, nil
		}
	})
	evs := events(t, 3)
	evs[1].Headers = nil
	evs[2].Headers = map[string]string{"tenant": "bad"}
	errs := core.EventErrors(3, p.Publish(context.Background(), evs))
	// The Route function's own Permanent error is kept; an invalid target
	// it returns is configuration, so that event stays pending.
	if errs[0] != nil || !errors.Is(errs[1], errNoTenant) || !core.IsPermanent(errs[1]) ||
		core.IsPermanent(errs[2]) || !errors.Is(errs[2], qstash.ErrConfiguration) {
		t.Fatalf("errs = %v", errs)
	}
	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].RequestURI != "/v2/enqueue/order/https://acme.example.com/events" {
		t.Fatalf("requests = %+v, want a single enqueue", reqs)
	}
}

// TestPublishWithoutRouteStaysPending: a type no route sends anywhere is a
// configuration gap (a relay deployed before the route for a new type), so
// its events stay pending rather than being dead-lettered.
func TestPublishWithoutRouteStaysPending(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, nil)
	p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) { c.Destination = qstash.Target{} })
	err := p.Publish(context.Background(), events(t, 2))
	if !errors.Is(err, qstash.ErrNoRoute) || !errors.Is(err, qstash.ErrConfiguration) || core.IsPermanent(err) {
		t.Fatalf("Publish = %v, want a transient ErrNoRoute matching ErrConfiguration", err)
	}
	if len(f.requests()) != 0 {
		t.Fatalf("a request was sent for unroutable events")
	}
}

// TestPublishUnsendableEventFailsAlone, in binary mode, where headers carry
// the attributes and a body that is not UTF-8 cannot be a batch element's
// JSON string.
func TestPublishUnsendableEventFailsAlone(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, nil)
	p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) { c.ContentMode = qstash.BinaryMode })
	evs := events(t, 3)
	evs[1].Headers = map[string]string{"bad name": "x"} // not an HTTP token
	evs[2].Payload = []byte("\"\xff\xfe\"")             // not UTF-8: cannot be a JSON string
	errs := core.EventErrors(3, p.Publish(context.Background(), evs))
	if errs[0] != nil || !core.IsPermanent(errs[1]) || errs[2] != nil {
		t.Fatalf("errs = %v, want only event 1 to fail, permanently", errs)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want the batch and a single publish", len(reqs))
	}
	// The non-UTF-8 payload travels as a raw body, byte for byte.
	var solo *recorded
	for i := range reqs {
		if strings.HasPrefix(reqs[i].RequestURI, "/v2/publish/") {
			solo = &reqs[i]
		}
	}
	if solo == nil || string(solo.Body) != string(evs[2].Payload) {
		t.Fatalf("non-UTF-8 payload not published alone and unchanged: %+v", reqs)
	}
}

func TestPublishSplitsLargeBatches(t *testing.T) {
	t.Parallel()
	f := newFakeQStash(t, nil)
	p := newTestPublisher(t, f, func(c *qstash.PublisherConfig) { c.MaxBatchSize = 2 })
	if err := p.Publish(context.Background(), events(t, 5)); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, r := range f.requests() {
		if r.RequestURI == "/v2/batch" {
			sizes = append(sizes, len(r.batch(t)))
		} else {
			sizes = append(sizes, 1)
		}
	}
	if fmt.Sprint(sizes) != "[2 2 1]" {
		t.Fatalf("request sizes %v, want [2 2 1]", sizes)
	}
}

func TestNewPublisherValidates(t *testing.T) {
	t.Parallel()
	neg := -1
	for _, tc := range []struct {
		field  string
		mutate func(*qstash.PublisherConfig)
	}{
		{"Token", func(c *qstash.PublisherConfig) { c.Token = "" }},
		{"Token", func(c *qstash.PublisherConfig) { c.Token = "abc\n" }},
		{"BaseURL", func(c *qstash.PublisherConfig) { c.BaseURL = "qstash.upstash.io" }},
		{"Destination", func(c *qstash.PublisherConfig) { c.Destination = qstash.Target{URL: "/relative"} }},
		{"Destination", func(c *qstash.PublisherConfig) { c.Destination = qstash.Target{URL: endpointURL, URLGroup: "g"} }},
		{"Destination", func(c *qstash.PublisherConfig) { c.Destination = qstash.Target{URL: endpointURL, Queue: "a/b"} }},
		{`Routes["x"]`, func(c *qstash.PublisherConfig) { c.Routes = map[string]qstash.Target{"x": {}} }},
		{"Route", func(c *qstash.PublisherConfig) {
			c.Route = func(core.Event) (qstash.Target, error) { return qstash.Target{}, nil }
		}},
		{"Retries", func(c *qstash.PublisherConfig) { c.Retries = &neg }},
		{"Timeout", func(c *qstash.PublisherConfig) { c.Timeout = 1500 * time.Millisecond }},
		{"Delay", func(c *qstash.PublisherConfig) { c.Delay = -time.Second }},
		{"Callback", func(c *qstash.PublisherConfig) { c.Callback = "not a url" }},
		{"FlowControl", func(c *qstash.PublisherConfig) { c.FlowControl = &qstash.FlowControl{} }},
		{"FlowControl.Period", func(c *qstash.PublisherConfig) {
			c.FlowControl = &qstash.FlowControl{Parallelism: 1, Period: time.Second}
		}},
		{"Label", func(c *qstash.PublisherConfig) { c.Label = "a\nb" }},
		{"MaxBatchSize", func(c *qstash.PublisherConfig) { c.MaxBatchSize = -1 }},
		{"ContentMode", func(c *qstash.PublisherConfig) { c.ContentMode = 7 }},
	} {
		cfg := &qstash.PublisherConfig{Token: testToken, Destination: qstash.Target{URL: endpointURL}}
		tc.mutate(cfg)
		_, err := qstash.NewPublisher(cfg)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("want a ConfigError on %s, got %v", tc.field, err)
		}
	}
	if _, err := qstash.NewPublisher(nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("NewPublisher(nil) = %v", err)
	}
	p, err := qstash.NewPublisher(&qstash.PublisherConfig{Token: testToken})
	if err != nil {
		t.Fatalf("a Token alone must be enough (events may carry Destination): %v", err)
	}
	_ = p.Close()
}

func TestPublishDefaultClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer target.Close()
	f := newFakeQStash(t, answer(308, map[string]string{"Location": target.URL + "/v2/batch"}, ""))
	p, err := qstash.NewPublisher(&qstash.PublisherConfig{BaseURL: f.URL, Token: testToken, Destination: qstash.Target{URL: endpointURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(context.Background(), events(t, 2)); err == nil {
		t.Fatal("Publish succeeded on a redirect")
	}
	if hits.Load() != 0 {
		t.Fatal("the redirect was followed: the token went to another host")
	}
}

// TestPublishEarlyAnswerDoesNotCorruptBodies has the server answer before
// reading large batch bodies, so the transport may still be writing a body
// when Publish returns; pooled buffers must not be reused under it (the race
// detector watches), and every later request must arrive intact.
func TestPublishEarlyAnswerDoesNotCorruptBodies(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	// Not newFakeQStash, which reads every body before answering.
	f := &fakeQStash{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 1 {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusRequestEntityTooLarge) // without reading the body
			return
		}
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.RequestURI, r.Header.Clone(), body})
		f.mu.Unlock()
		answerOK(w, r, body)
	}))
	t.Cleanup(f.Close)
	p := newTestPublisher(t, f)
	big := events(t, 50)
	for i := range big {
		big[i].Payload = []byte(`{"pad":"` + strings.Repeat(strconv.Itoa(i%10), 20<<10) + `"}`)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_ = p.Publish(context.Background(), big)
			}
		}()
	}
	wg.Wait()
	for _, r := range f.requests() {
		if r.RequestURI != "/v2/batch" {
			// A batch refused with 413 is sent again one event at a time.
			var ok bool
			for i := range big {
				ok = ok || string(r.Body) == string(deliveryBody(t, big[i]))
			}
			if !ok {
				t.Fatalf("single publish %s arrived altered", r.RequestURI)
			}
			continue
		}
		els := r.batch(t)
		if len(els) != len(big) {
			t.Fatalf("batch of %d messages, want %d", len(els), len(big))
		}
		for i, el := range els {
			if el.Body != string(deliveryBody(t, big[i])) {
				t.Fatalf("message %d arrived altered", i)
			}
		}
	}
	if len(f.requests()) == 0 {
		t.Fatal("no request was read in full")
	}
}
