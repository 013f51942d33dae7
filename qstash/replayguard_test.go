package qstash_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// TestReceiverTakesAttributesFromSignedBody: in structured mode the event is
// read from the signed body alone; ce-* headers added to the request (QStash
// signs none) change nothing the handler sees.
func TestReceiverTakesAttributesFromSignedBody(t *testing.T) {
	t.Parallel()
	h, d := &effects{}, &recordingDeduper{}
	rc, _ := newTestReceiver(t, h, d)
	e := testEvent(t)
	r := deliveryRequest(e, signed(t, currentKey, e))
	for k, v := range map[string]string{
		"ce-specversion": "1.0", "ce-id": core.NewID().String(), "ce-type": "order.refunded", "ce-source": "attacker",
		"ce-subject": "o-999", "ce-aggregatetype": "invoice", "ce-sequence": "1000", "ce-schemaversion": "9",
		"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "ce-x-tenant": "evil", "ce-x-role": "admin",
	} {
		r.Header.Set(k, v)
	}
	if w := serve(rc, r); w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200 (%s)", w.Code, w.Body)
	}
	got := h.Applied()
	if len(got) != 1 {
		t.Fatalf("%d effects, want 1", len(got))
	}
	g := got[0]
	if g.ID != e.ID || g.Type != e.Type || g.Source != e.Source || g.AggregateID != e.AggregateID || g.AggregateType != e.AggregateType ||
		g.Sequence != e.Sequence || g.SchemaVersion != e.SchemaVersion || g.Headers["tenant"] != "acme" || g.Headers["role"] != "" ||
		g.Headers["traceparent"] != e.Headers["traceparent"] || string(g.Payload) != string(e.Payload) {
		t.Errorf("handled %+v\nwant the signed event %+v", g, e)
	}
}

// TestReceiverRefusesReplayedToken: a token is accepted once. The same
// token and body again are refused (401, ErrTokenReplayed) without reaching
// the Deduper, while QStash's retry of the same message, which carries a
// token of its own, goes through to the Deduper as a duplicate.
func TestReceiverRefusesReplayedToken(t *testing.T) {
	t.Parallel()
	h, d := &effects{}, &recordingDeduper{}
	rc, decisions := newTestReceiver(t, h, d)
	e := testEvent(t)
	token := signed(t, currentKey, e)
	if w := serve(rc, deliveryRequest(e, token)); w.Code != http.StatusOK {
		t.Fatalf("first delivery: status %d", w.Code)
	}
	for range 3 {
		if w := serve(rc, deliveryRequest(e, token)); w.Code != http.StatusUnauthorized {
			t.Fatalf("replay: status %d, want 401", w.Code)
		}
	}
	if w := serve(rc, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusOK {
		t.Fatalf("a retry with a fresh token: status %d, want 200", w.Code)
	}
	if n, calls := len(h.Applied()), d.Calls(); n != 1 || calls != 2 {
		t.Errorf("%d effects, %d deduper calls; want 1 and 2 (the replays reach neither)", n, calls)
	}
	ds := *decisions
	if len(ds) != 5 {
		t.Fatalf("%d decisions, want 5", len(ds))
	}
	for _, dec := range ds[1:4] {
		if dec.Outcome != qstash.OutcomeUnauthorized || !errors.Is(dec.Err, qstash.ErrTokenReplayed) || !errors.Is(dec.Err, qstash.ErrInvalidSignature) {
			t.Errorf("replay decision %+v, want unauthorized with ErrTokenReplayed", dec)
		}
	}
	if ds[4].Outcome != qstash.OutcomeDuplicate {
		t.Errorf("retry decision %v, want duplicate", ds[4].Outcome)
	}
}

// TestReceiverRefusesTokenWithoutID: QStash always sets jti; a token without
// one could be replayed unnoticed, so it is refused.
func TestReceiverRefusesTokenWithoutID(t *testing.T) {
	t.Parallel()
	h, d := &effects{}, &recordingDeduper{}
	rc, decisions := newTestReceiver(t, h, d)
	e := testEvent(t)
	c := claims(deliveryBody(t, e), endpointURL)
	delete(c, "jti")
	if w := serve(rc, deliveryRequest(e, mint(t, jwt.SigningMethodHS256, []byte(currentKey), c))); w.Code != http.StatusUnauthorized || d.Calls() != 0 {
		t.Fatalf("status %d, %d deduper calls; want 401 and none", w.Code, d.Calls())
	}
	if ds := *decisions; len(ds) != 1 || !errors.Is(ds[0].Err, qstash.ErrMissingTokenID) {
		t.Fatalf("decisions %+v, want ErrMissingTokenID", ds)
	}
}

// TestReceiverBinaryModeOnlyWhenAllowed: a binary-mode delivery is refused
// (415) unless AllowBinaryMode is set; with it, its attributes come from the
// headers, and the replay guard still limits each token to one use, so the
// captured-and-relabelled delivery of the issue applies once.
func TestReceiverBinaryModeOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	e := testEvent(t)
	h, d := &effects{}, &recordingDeduper{}
	strict, _ := newTestReceiver(t, h, d)
	if w := serve(strict, binaryDeliveryRequest(e, signedBinary(t, currentKey, e))); w.Code != http.StatusUnsupportedMediaType || d.Calls() != 0 {
		t.Fatalf("binary delivery to a strict receiver: status %d, %d deduper calls; want 415 and none", w.Code, d.Calls())
	}

	lax, _ := newTestReceiver(t, h, d, func(c *qstash.ReceiverConfig) { c.AllowBinaryMode = true })
	token := signedBinary(t, currentKey, e)
	if w := serve(lax, binaryDeliveryRequest(e, token)); w.Code != http.StatusOK {
		t.Fatalf("binary delivery with AllowBinaryMode: status %d (%s)", w.Code, w.Body)
	}
	for range 5 {
		r := binaryDeliveryRequest(e, token)
		r.Header.Set("ce-id", core.NewID().String())
		if w := serve(lax, r); w.Code != http.StatusUnauthorized {
			t.Fatalf("replay with a fresh ce-id: status %d, want 401", w.Code)
		}
	}
	if got := h.Applied(); len(got) != 1 || got[0].ID != e.ID {
		t.Fatalf("applied %d events, want the original once", len(got))
	}
	// Structured deliveries still work on a receiver that allows binary.
	if w := serve(lax, deliveryRequest(e, signed(t, currentKey, e))); w.Code != http.StatusOK {
		t.Fatalf("structured delivery with AllowBinaryMode: status %d", w.Code)
	}
}

// failingGuard is a ReplayGuard whose store is down.
type failingGuard struct{ err error }

func (g failingGuard) FirstUse(context.Context, string, time.Time) (bool, error) { return false, g.err }

// TestReceiverReplayGuardFailureIsTransient: when the guard cannot answer,
// nothing runs and QStash is told to retry (500, or 503 with Retry-After).
func TestReceiverReplayGuardFailureIsTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err        error
		wantStatus int
		wantRA     string
	}{
		{errors.New("database down"), 500, ""},
		{core.RetryAfter(errors.New("busy"), 90*time.Second), 503, "90"},
	} {
		h, d := &effects{}, &recordingDeduper{}
		rc, decisions := newTestReceiver(t, h, d, func(c *qstash.ReceiverConfig) { c.ReplayGuard = failingGuard{tc.err} })
		e := testEvent(t)
		w := serve(rc, deliveryRequest(e, signed(t, currentKey, e)))
		if w.Code != tc.wantStatus || w.Header().Get("Retry-After") != tc.wantRA || d.Calls() != 0 {
			t.Errorf("%v: status %d, Retry-After %q, %d deduper calls; want %d, %q, none", tc.err, w.Code, w.Header().Get("Retry-After"), d.Calls(), tc.wantStatus, tc.wantRA)
		}
		if ds := *decisions; len(ds) != 1 || ds[0].Outcome != qstash.OutcomeTransient || !errors.Is(ds[0].Err, tc.err) {
			t.Errorf("decisions %+v, want one transient with the guard's error", ds)
		}
	}
}

// TestReplayGuardSharedByInstances: two receivers (two instances of one
// consumer) sharing a guard refuse a replay sent to the other instance.
func TestReplayGuardSharedByInstances(t *testing.T) {
	t.Parallel()
	guard := qstash.NewMemoryReplayGuard(&qstash.MemoryReplayGuardConfig{Clock: fixedClock{testNow}})
	h, d := &effects{}, &recordingDeduper{}
	a, _ := newTestReceiver(t, h, d, func(c *qstash.ReceiverConfig) { c.ReplayGuard = guard })
	b, _ := newTestReceiver(t, h, d, func(c *qstash.ReceiverConfig) { c.ReplayGuard = guard })
	e := testEvent(t)
	token := signed(t, currentKey, e)
	if w := serve(a, deliveryRequest(e, token)); w.Code != http.StatusOK {
		t.Fatalf("instance a: status %d", w.Code)
	}
	if w := serve(b, deliveryRequest(e, token)); w.Code != http.StatusUnauthorized {
		t.Fatalf("replay to instance b: status %d, want 401", w.Code)
	}
}

// TestMemoryReplayGuardIsBounded: a token is remembered until it expires and
// forgotten afterwards, so memory follows the rate of deliveries, not their
// total; past MaxTokens live tokens the guard refuses new ones (with the
// wait until the oldest expires) rather than forget a live one.
func TestMemoryReplayGuardIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := coretest.NewFakeClock(testNow)
	g := qstash.NewMemoryReplayGuard(&qstash.MemoryReplayGuardConfig{MaxTokens: 3, Clock: clock})
	exp := testNow.Add(qstash.TokenLifetime)
	for i, id := range []string{"a", "b", "c"} {
		first, err := g.FirstUse(ctx, id, exp.Add(time.Duration(i)*time.Second))
		if !first || err != nil {
			t.Fatalf("FirstUse(%s) = %v, %v; want true", id, first, err)
		}
	}
	if first, err := g.FirstUse(ctx, "b", exp); first || err != nil {
		t.Fatalf("FirstUse(b) again = %v, %v; want false", first, err)
	}
	_, err := g.FirstUse(ctx, "d", exp)
	hint, ok := core.RetryAfterHint(err)
	if !errors.Is(err, qstash.ErrReplayGuardFull) || !ok || hint != qstash.TokenLifetime {
		t.Fatalf("FirstUse(d) when full = %v (hint %v); want ErrReplayGuardFull, retry after %v", err, hint, qstash.TokenLifetime)
	}

	clock.Advance(qstash.TokenLifetime) // a expires
	if first, err := g.FirstUse(ctx, "d", clock.Now().Add(qstash.TokenLifetime)); !first || err != nil {
		t.Fatalf("FirstUse(d) after a expired = %v, %v", first, err)
	}
	if first, _ := g.FirstUse(ctx, "b", exp); first {
		t.Fatal("b accepted again before it expired")
	}
	clock.Advance(time.Hour)
	if first, err := g.FirstUse(ctx, "e", clock.Now().Add(qstash.TokenLifetime)); !first || err != nil {
		t.Fatalf("FirstUse(e) = %v, %v", first, err)
	}
	if n := g.Len(); n != 1 {
		t.Fatalf("%d tokens held an hour later, want 1: expired tokens must be forgotten", n)
	}
}

// TestMemoryReplayGuardConcurrentFirstUse: of many concurrent presentations
// of one token, exactly one is its first use.
func TestMemoryReplayGuardConcurrentFirstUse(t *testing.T) {
	t.Parallel()
	g := qstash.NewMemoryReplayGuard(nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, err := g.FirstUse(context.Background(), "jwt_same", time.Now().Add(time.Minute))
			if err != nil {
				t.Error(err)
			}
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firsts != 1 {
		t.Fatalf("%d first uses of one token, want 1", firsts)
	}
}

// TestQStashDevRetriesCarryFreshTokens: QStash signs each attempt anew, and
// so does qstashdev: a delivery that fails twice arrives three times, each
// with its own jti, and each passes the replay guard.
func TestQStashDevRetriesCarryFreshTokens(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var jtis []string
	env := newDevEnv(t, qstashdev.Config{}, nil, func(c *qstash.ReceiverConfig) {
		c.OnDecision = func(_ context.Context, d qstash.Decision) {
			if d.Outcome == qstash.OutcomeUnauthorized {
				t.Errorf("attempt refused: %v", d.Err)
			}
		}
	})
	env.handler.fail = func(_ core.Event, d qstash.Delivery) error {
		if d.Retried < 2 {
			return errors.New("database unavailable")
		}
		return nil
	}
	v, err := qstash.NewVerifier(&qstash.VerifierConfig{CurrentSigningKey: qstashdev.DefaultCurrentSigningKey, NextSigningKey: qstashdev.DefaultNextSigningKey})
	if err != nil {
		t.Fatal(err)
	}
	e := testEvent(t)
	hook := func(r *http.Request, body []byte) {
		c, err := v.VerifyToken(r.Header.Get("Upstash-Signature"), body, env.url)
		if err != nil {
			t.Errorf("attempt's token does not verify: %v", err)
			return
		}
		mu.Lock()
		jtis = append(jtis, c.ID)
		mu.Unlock()
	}
	env.onRequest.Store(&hook)
	if err := env.pub.Publish(context.Background(), []core.Event{e}); err != nil {
		t.Fatal(err)
	}
	env.waitIdle(t)
	applied, deliveries := env.handler.snapshot()
	if applied[e.ID] != 1 || len(deliveries) != 3 {
		t.Fatalf("applied %d times in %d attempts, want once in 3", applied[e.ID], len(deliveries))
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, j := range jtis {
		if j == "" || seen[j] || !strings.HasPrefix(j, "jwt_") {
			t.Errorf("jti %q empty, repeated or not QStash's form (jtis %v)", j, jtis)
		}
		seen[j] = true
	}
	if len(jtis) != 3 {
		t.Errorf("%d tokens seen, want 3", len(jtis))
	}
}
