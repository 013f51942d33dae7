package qstash_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/sigmatrix"
	"github.com/outboxkit/outboxkit/qstash"
)

// signatureCases is the signature matrix (internal/sigmatrix) for this
// package's keys, endpoint and clock. internal/interop/qstashsdk sends the
// same rows to the official SDK's verifier.
func signatureCases() []sigmatrix.Case {
	return sigmatrix.Cases(sigmatrix.Target{CurrentKey: currentKey, NextKey: nextKey, URL: endpointURL, Now: testNow})
}

func newTestVerifier(t testing.TB) *qstash.Verifier {
	t.Helper()
	v, err := qstash.NewVerifier(&qstash.VerifierConfig{
		CurrentSigningKey: currentKey,
		NextSigningKey:    nextKey,
		Clock:             fixedClock{testNow},
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerifyMatrix(t *testing.T) {
	t.Parallel()
	v := newTestVerifier(t)
	body := []byte(`{"order":"o-1","total":42}`)
	for _, tc := range signatureCases() {
		t.Run(tc.Name, func(t *testing.T) {
			tok := tc.Token(t, body)
			err := v.Verify(tok, body, endpointURL)
			if tc.WantErr == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
			} else {
				if !errors.Is(err, tc.WantErr) || !errors.Is(err, qstash.ErrInvalidSignature) {
					t.Fatalf("Verify = %v, want %v (matching ErrInvalidSignature)", err, tc.WantErr)
				}
				var ve *qstash.VerificationError
				if !errors.As(err, &ve) || ve.Reason != tc.WantErr {
					t.Fatalf("Verify = %#v, want a *VerificationError with Reason %v", err, tc.WantErr)
				}
			}
		})
	}
}

func TestVerifyClockBoundaries(t *testing.T) {
	t.Parallel()
	body := []byte(`{}`)
	tok := mint(t, jwt.SigningMethodHS256, []byte(currentKey), claims(body, endpointURL)) // exp = testNow+300
	for _, tc := range []struct {
		now     time.Time
		leeway  time.Duration
		wantErr error
	}{
		{testNow.Add(300*time.Second - time.Nanosecond), -1, nil},
		{testNow.Add(300 * time.Second), -1, qstash.ErrTokenExpired},
		{testNow.Add(304 * time.Second), 0, nil}, // default leeway 5s
		{testNow.Add(305 * time.Second), 0, qstash.ErrTokenExpired},
		{testNow.Add(-5 * time.Second), 0, nil},                        // nbf/iat within leeway
		{testNow.Add(-6 * time.Second), 0, qstash.ErrTokenNotYetValid}, // beyond it
	} {
		v, err := qstash.NewVerifier(&qstash.VerifierConfig{CurrentSigningKey: currentKey, NextSigningKey: nextKey, Clock: fixedClock{tc.now}, Leeway: tc.leeway})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(tok, body, endpointURL); !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("at %s (leeway %s): Verify = %v, want %v", tc.now.Sub(testNow), tc.leeway, err, tc.wantErr)
		}
	}
}

func TestNewVerifierRefusesBadKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, cur, next, field string }{
		{"empty current", "", nextKey, "CurrentSigningKey"},
		{"empty next", currentKey, "", "NextSigningKey"},
		{"trailing newline", currentKey + "\n", nextKey, "CurrentSigningKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := qstash.NewVerifier(&qstash.VerifierConfig{CurrentSigningKey: tc.cur, NextSigningKey: tc.next})
			var ce *core.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, core.ErrInvalidConfig) {
				t.Fatalf("NewVerifier = %v, want a ConfigError on %s", err, tc.field)
			}
		})
	}
	if _, err := qstash.NewVerifier(nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("NewVerifier(nil) = %v", err)
	}
	if _, err := qstash.NewVerifier(&qstash.VerifierConfig{CurrentSigningKey: currentKey, NextSigningKey: nextKey, Leeway: time.Hour}); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("NewVerifier(Leeway 1h) = %v, want a ConfigError", err)
	}
}

// TestReceiverSignatureMatrix sends each row of the matrix to a Receiver:
// refused tokens answer 401 and neither the deduper nor the handler runs.
func TestReceiverSignatureMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range signatureCases() {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			h, d := &effects{}, &recordingDeduper{}
			rc, decisions := newTestReceiver(t, h, d)
			e := testEvent(t)
			w := serve(rc, deliveryRequest(e, tc.Token(t, deliveryBody(t, e))))
			if tc.WantErr == nil {
				if w.Code != http.StatusOK || len(h.Applied()) != 1 {
					t.Fatalf("status %d, %d effect(s); want 200 and 1 (body %s)", w.Code, len(h.Applied()), w.Body)
				}
				return
			}
			if w.Code != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401 (body %s)", w.Code, w.Body)
			}
			if n := len(h.Applied()); n != 0 || d.Calls() != 0 {
				t.Fatalf("%d effect(s), %d deduper call(s) for a refused request; want none", n, d.Calls())
			}
			if got := *decisions; len(got) != 1 || got[0].Outcome != qstash.OutcomeUnauthorized || !errors.Is(got[0].Err, tc.WantErr) {
				t.Fatalf("decisions = %+v, want one OutcomeUnauthorized with %v", got, tc.WantErr)
			}
		})
	}
}

func TestReceiverRefusesTwoSignatureHeaders(t *testing.T) {
	t.Parallel()
	h, d := &effects{}, &recordingDeduper{}
	rc, _ := newTestReceiver(t, h, d)
	e := testEvent(t)
	r := deliveryRequest(e, signed(t, currentKey, e))
	r.Header.Add("Upstash-Signature", signed(t, nextKey, e))
	if w := serve(rc, r); w.Code != http.StatusUnauthorized || d.Calls() != 0 {
		t.Fatalf("status %d, %d deduper calls; want 401 and none", w.Code, d.Calls())
	}
}
