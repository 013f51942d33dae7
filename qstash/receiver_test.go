package qstash_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

func TestReceiverAppliesAndAnswers200(t *testing.T) {
	t.Parallel()
	h, d := &effects{}, &recordingDeduper{}
	rc, decisions := newTestReceiver(t, h, d)
	e := testEvent(t)
	w := serve(rc, deliveryRequest(e, signed(t, currentKey, e)))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200 (body %s)", w.Code, w.Body)
	}
	var body struct{ Status, EventID string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Status != "applied" || body.EventID != e.ID.String() {
		t.Errorf("body %s: want {status: applied, eventId: %s}", w.Body, e.ID)
	}
	got := h.Applied()
	if len(got) != 1 {
		t.Fatalf("%d effects, want 1", len(got))
	}
	// The event survives the trip through CloudEvents headers unchanged.
	want := e
	want.Attempts = 0
	if g := got[0]; g.ID != want.ID || g.Type != want.Type || g.Source != want.Source || g.AggregateType != want.AggregateType ||
		g.AggregateID != want.AggregateID || g.Sequence != want.Sequence || string(g.Payload) != string(want.Payload) ||
		!g.CreatedAt.Equal(want.CreatedAt) || g.SchemaVersion != want.SchemaVersion || len(g.Headers) != len(want.Headers) {
		t.Errorf("handled event %+v\nwant %+v", g, want)
	}
	for k, v := range want.Headers {
		if got[0].Headers[k] != v {
			t.Errorf("header %q = %q, want %q", k, got[0].Headers[k], v)
		}
	}
	// The handler sees the delivery through its context.
	del, ok := qstash.DeliveryFromContext(h.ctxs[0])
	if !ok || del.MessageID != "msg_test_1" || del.Retried != 2 {
		t.Errorf("DeliveryFromContext = %+v, %v; want msg_test_1, retried 2", del, ok)
	}
	if ds := *decisions; len(ds) != 1 || ds[0].Outcome != qstash.OutcomeApplied || ds[0].Status != 200 || ds[0].Event.ID != e.ID || ds[0].Delivery.MessageID != "msg_test_1" {
		t.Errorf("decisions = %+v", ds)
	}
}

func TestReceiverDuplicateAppliesOnce(t *testing.T) {
	t.Parallel()
	h, d := &effects{}, &recordingDeduper{}
	rc, decisions := newTestReceiver(t, h, d)
	e := testEvent(t)
	for i := range 3 {
		// A redelivery, or a relay republishing the event: new message ID,
		// same event ID.
		r := deliveryRequest(e, signed(t, currentKey, e))
		r.Header.Set("Upstash-Message-Id", "msg_"+string(rune('a'+i)))
		if w := serve(rc, r); w.Code != http.StatusOK {
			t.Fatalf("delivery %d: status %d, want 200", i, w.Code)
		}
	}
	if n := len(h.Applied()); n != 1 {
		t.Fatalf("effect applied %d times, want once", n)
	}
	var outcomes []qstash.Outcome
	for _, dec := range *decisions {
		outcomes = append(outcomes, dec.Outcome)
	}
	if len(outcomes) != 3 || outcomes[0] != qstash.OutcomeApplied || outcomes[1] != qstash.OutcomeDuplicate || outcomes[2] != qstash.OutcomeDuplicate {
		t.Errorf("outcomes = %v, want applied, duplicate, duplicate", outcomes)
	}
}

func TestReceiverErrorOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		handler    *effects
		wantStatus int
		wantNR     bool
		wantRA     string
		outcome    qstash.Outcome
	}{
		{"permanent", &effects{err: core.Permanent(errors.New("order unknown"))}, 489, true, "", qstash.OutcomePermanent},
		{"unknown type through a Mux that dead-letters them", nil, 489, true, "", qstash.OutcomePermanent},
		{"transient", &effects{err: errors.New("database down")}, 500, false, "", qstash.OutcomeTransient},
		{"transient with a hint", &effects{err: core.RetryAfter(errors.New("busy"), 1500*time.Millisecond)}, 503, false, "2", qstash.OutcomeTransient},
		{"panic", &effects{panic: "boom"}, 500, false, "", qstash.OutcomeTransient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h core.Handler = core.NewMux(core.DeadLetterUnknownTypes())
			if tc.handler != nil {
				h = tc.handler
			}
			d := &recordingDeduper{}
			rc, decisions := newTestReceiver(t, h, d)
			e := testEvent(t)
			w := serve(rc, deliveryRequest(e, signed(t, currentKey, e)))
			if w.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d", w.Code, tc.wantStatus)
			}
			if got := w.Header().Get("Upstash-NonRetryable-Error") == "true"; got != tc.wantNR {
				t.Errorf("Upstash-NonRetryable-Error present = %v, want %v", got, tc.wantNR)
			}
			if got := w.Header().Get("Retry-After"); got != tc.wantRA {
				t.Errorf("Retry-After = %q, want %q", got, tc.wantRA)
			}
			if ds := *decisions; len(ds) != 1 || ds[0].Outcome != tc.outcome || ds[0].Err == nil {
				t.Errorf("decisions = %+v, want one %v with its error", ds, tc.outcome)
			}
			// A failed effect is not recorded: the next delivery runs it again.
			if tc.handler != nil {
				tc.handler.err, tc.handler.panic = nil, nil
				if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusOK || len(tc.handler.Applied()) != 1 {
					t.Errorf("redelivery after the failure: status %d, %d effects; want 200 and 1", w.Code, len(tc.handler.Applied()))
				}
			}
		})
	}
}

// panickingDeduper fails in the Deduper itself, outside the handler.
type panickingDeduper struct{}

func (panickingDeduper) Once(context.Context, core.DedupeKey, func(context.Context) error) (bool, error) {
	panic("deduper bug")
}

func TestReceiverRecoversDeduperPanic(t *testing.T) {
	t.Parallel()
	rc, _ := newTestReceiver(t, &effects{}, panickingDeduper{})
	e := testEvent(t)
	if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", w.Code)
	}
}

func TestReceiverRefusesWithoutEffect(t *testing.T) {
	t.Parallel()
	big := testEvent(t)
	big.Payload = []byte(`{"pad":"` + strings.Repeat("x", 2048) + `"}`)
	// body rewrites e's structured-mode document and signs the result, as a
	// publisher producing it would.
	body := func(t *testing.T, edit func(string) string) *http.Request {
		b := edit(string(deliveryBody(t, testEvent(t))))
		return rawDelivery([]byte(b), signedBody(t, currentKey, []byte(b)))
	}
	binary := func(t *testing.T, edit func(http.Header)) *http.Request {
		e := testEvent(t)
		r := binaryDeliveryRequest(e, signedBinary(t, currentKey, e))
		edit(r.Header)
		return r
	}
	for _, tc := range []struct {
		name        string
		req         func(t *testing.T) *http.Request
		allowBinary bool
		wantStatus  int
		outcome     qstash.Outcome
	}{
		{"malformed id", func(t *testing.T) *http.Request {
			return body(t, func(s string) string {
				return regexp.MustCompile(`"id":"[^"]*"`).ReplaceAllString(s, `"id":"not-a-uuid"`)
			})
		}, false, 400, qstash.OutcomeMalformed},
		{"missing specversion", func(t *testing.T) *http.Request {
			return body(t, func(s string) string { return strings.Replace(s, `"specversion":"1.0",`, "", 1) })
		}, false, 400, qstash.OutcomeMalformed},
		{"repeated id", func(t *testing.T) *http.Request {
			return body(t, func(s string) string { return strings.Replace(s, "{", `{"id":"`+core.NewID().String()+`",`, 1) })
		}, false, 400, qstash.OutcomeMalformed},
		{"bad sequence", func(t *testing.T) *http.Request {
			return body(t, func(s string) string { return strings.Replace(s, `"sequence":"7"`, `"sequence":"-1"`, 1) })
		}, false, 400, qstash.OutcomeMalformed},
		{"not JSON", func(t *testing.T) *http.Request {
			return body(t, func(s string) string { return s[:len(s)-1] })
		}, false, 400, qstash.OutcomeMalformed},
		{"binary mode not allowed", func(t *testing.T) *http.Request {
			return binary(t, func(http.Header) {})
		}, false, 415, qstash.OutcomeMalformed},
		{"binary mode: malformed ce-id", func(t *testing.T) *http.Request {
			return binary(t, func(h http.Header) { h.Set("ce-id", "not-a-uuid") })
		}, true, 400, qstash.OutcomeMalformed},
		{"binary mode: missing ce-specversion", func(t *testing.T) *http.Request {
			return binary(t, func(h http.Header) { h.Del("ce-specversion") })
		}, true, 400, qstash.OutcomeMalformed},
		{"binary mode: repeated ce-id", func(t *testing.T) *http.Request {
			return binary(t, func(h http.Header) { h.Add("ce-id", core.NewID().String()) })
		}, true, 400, qstash.OutcomeMalformed},
		{"binary mode: bad sequence", func(t *testing.T) *http.Request {
			return binary(t, func(h http.Header) { h.Set("ce-sequence", "-1") })
		}, true, 400, qstash.OutcomeMalformed},
		{"binary mode: a structured body relabelled as binary", func(t *testing.T) *http.Request {
			// A captured structured delivery, relabelled with binary-mode
			// headers naming another event: Content-Type is not signed.
			b := deliveryBody(t, testEvent(t))
			r := rawDelivery(b, signedBody(t, currentKey, b))
			for k, v := range core.CloudEventHeaders(testEvent(t)) {
				r.Header.Set(k, v)
			}
			r.Header.Set("Content-Type", "application/json")
			return r
		}, true, 400, qstash.OutcomeMalformed},
		{"GET", func(t *testing.T) *http.Request {
			e := testEvent(t)
			r := deliveryRequest(e, signed(t, currentKey, e))
			r.Method = http.MethodGet
			return r
		}, false, 405, qstash.OutcomeMalformed},
		{"too large, declared", func(t *testing.T) *http.Request {
			return deliveryRequest(big, signed(t, currentKey, big))
		}, false, 413, qstash.OutcomeTooLarge},
		{"too large, chunked", func(t *testing.T) *http.Request {
			r := deliveryRequest(big, signed(t, currentKey, big))
			r.ContentLength = -1
			return r
		}, false, 413, qstash.OutcomeTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, d := &effects{}, &recordingDeduper{}
			rc, decisions := newTestReceiver(t, h, d, func(c *qstash.ReceiverConfig) { c.MaxBodyBytes = 1024; c.AllowBinaryMode = tc.allowBinary })
			w := serve(rc, tc.req(t))
			if w.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d (body %s)", w.Code, tc.wantStatus, w.Body)
			}
			if len(h.Applied()) != 0 || d.Calls() != 0 {
				t.Fatalf("refused request reached the deduper (%d) or handler (%d)", d.Calls(), len(h.Applied()))
			}
			if ds := *decisions; len(ds) != 1 || ds[0].Outcome != tc.outcome {
				t.Errorf("decisions = %+v, want one %v", ds, tc.outcome)
			}
		})
	}
}

func TestReceiverBodyAtLimitIsAccepted(t *testing.T) {
	t.Parallel()
	e := testEvent(t)
	h := &effects{}
	rc, _ := newTestReceiver(t, h, &recordingDeduper{}, func(c *qstash.ReceiverConfig) { c.MaxBodyBytes = int64(len(deliveryBody(t, e))) })
	if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusOK {
		t.Fatalf("status %d for a body of exactly MaxBodyBytes, want 200", w.Code)
	}
}

func TestNewReceiverValidates(t *testing.T) {
	t.Parallel()
	valid := func() *qstash.ReceiverConfig {
		return &qstash.ReceiverConfig{
			CurrentSigningKey: currentKey, NextSigningKey: nextKey, URL: endpointURL,
			Handler: &effects{}, Deduper: &recordingDeduper{}, Consumer: "billing",
		}
	}
	if _, err := qstash.NewReceiver(valid()); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tc := range []struct {
		field  string
		mutate func(*qstash.ReceiverConfig)
	}{
		{"CurrentSigningKey", func(c *qstash.ReceiverConfig) { c.CurrentSigningKey = "" }},
		{"NextSigningKey", func(c *qstash.ReceiverConfig) { c.NextSigningKey = "" }},
		{"URL", func(c *qstash.ReceiverConfig) { c.URL = "" }},
		{"URL", func(c *qstash.ReceiverConfig) { c.URL = "/qstash/orders" }},
		{"Handler", func(c *qstash.ReceiverConfig) { c.Handler = nil }},
		{"Deduper", func(c *qstash.ReceiverConfig) { c.Deduper = nil }},
		{"Consumer", func(c *qstash.ReceiverConfig) { c.Consumer = "" }},
		{"MaxBodyBytes", func(c *qstash.ReceiverConfig) { c.MaxBodyBytes = -1 }},
	} {
		cfg := valid()
		tc.mutate(cfg)
		_, err := qstash.NewReceiver(cfg)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("config without a valid %s: err = %v, want a ConfigError on it", tc.field, err)
		}
	}
}

// Middleware wraps the dedupe step: it sees every delivery, duplicates
// included, and the error the handler returned.
func TestReceiverMiddlewareWrapsDedupe(t *testing.T) {
	t.Parallel()
	h, d := &effects{}, &recordingDeduper{}
	var mu sync.Mutex
	var seen []string
	rc, decisions := newTestReceiver(t, h, d, func(c *qstash.ReceiverConfig) {
		c.Middleware = []core.HandlerMiddleware{func(next core.Handler) core.Handler {
			return core.HandlerFunc(func(ctx context.Context, e core.Event) error {
				err := next.Handle(ctx, e)
				mu.Lock()
				seen = append(seen, e.ID.String())
				mu.Unlock()
				return err
			})
		}}
	})
	e := testEvent(t)
	for range 2 {
		if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusOK {
			t.Fatalf("status %d, want 200", w.Code)
		}
	}
	if len(seen) != 2 || len(h.Applied()) != 1 {
		t.Fatalf("middleware saw %d deliveries and the effect ran %d times; want 2 and 1", len(seen), len(h.Applied()))
	}
	if ds := *decisions; len(ds) != 2 || ds[0].Outcome != qstash.OutcomeApplied || ds[1].Outcome != qstash.OutcomeDuplicate {
		t.Fatalf("decisions = %+v, want applied then duplicate", ds)
	}
}
