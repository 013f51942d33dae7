package qstash_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/upstash/qstash-go"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// signatureCase is one row of the signature matrix.
type signatureCase struct {
	name  string
	token func(t *testing.T, body []byte) string
	// wantErr is the sentinel our Verifier reports; nil means accepted.
	wantErr error
	// sdkAccepts is what the official SDK v1.0.0 verifier does with the same
	// token, body and URL, to document (and keep checking) where it is
	// weaker. sdkCurrentKey, when set, replaces the SDK's current key.
	sdkAccepts    bool
	sdkCurrentKey *string
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for kk, vv := range c {
		out[kk] = vv
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func signatureCases() []signatureCase {
	empty := ""
	hs256 := func(key string, mut func(jwt.MapClaims) jwt.MapClaims) func(*testing.T, []byte) string {
		return func(t *testing.T, body []byte) string {
			c := claims(body, endpointURL)
			if mut != nil {
				c = mut(c)
			}
			return mint(t, jwt.SigningMethodHS256, []byte(key), c)
		}
	}
	set := func(k string, v any) func(jwt.MapClaims) jwt.MapClaims {
		return func(c jwt.MapClaims) jwt.MapClaims { return with(c, k, v) }
	}
	return []signatureCase{
		{name: "valid, current key", token: hs256(currentKey, nil), sdkAccepts: true},
		{name: "valid, next key (rotation)", token: hs256(nextKey, nil), sdkAccepts: true},
		{name: "body hash without padding", token: hs256(currentKey, func(c jwt.MapClaims) jwt.MapClaims {
			return with(c, "body", strings.TrimRight(c["body"].(string), "="))
		}), sdkAccepts: true},
		{name: "nbf 0, as QStash may send", token: hs256(currentKey, set("nbf", 0)), sdkAccepts: true},
		{name: "nbf slightly ahead, within leeway", token: hs256(currentKey, set("nbf", testNow.Unix()+3)), sdkAccepts: false},

		{name: "signed with an empty key", token: hs256("", nil), wantErr: qstash.ErrSignatureMismatch,
			sdkAccepts: true, sdkCurrentKey: &empty},
		{name: "no exp", token: hs256(currentKey, set("exp", nil)), wantErr: qstash.ErrMissingExpiry, sdkAccepts: true},
		{name: "tampered body", token: func(t *testing.T, body []byte) string {
			return hs256(currentKey, nil)(t, append([]byte(`{"x":1}`), body...))
		}, wantErr: qstash.ErrBodyMismatch},
		{name: "no body claim", token: hs256(currentKey, set("body", nil)), wantErr: qstash.ErrBodyMismatch},
		{name: "wrong key", token: hs256("sig_someoneElsesKey000000000000", nil), wantErr: qstash.ErrSignatureMismatch},
		{name: "wrong sub", token: hs256(currentKey, set("sub", "https://consumer.example.com/qstash/other")), wantErr: qstash.ErrInvalidSubject},
		{name: "sub with trailing slash", token: hs256(currentKey, set("sub", endpointURL+"/")), wantErr: qstash.ErrInvalidSubject},
		{name: "no sub", token: hs256(currentKey, set("sub", nil)), wantErr: qstash.ErrInvalidSubject},
		{name: "wrong issuer", token: hs256(currentKey, set("iss", "Mallory")), wantErr: qstash.ErrInvalidIssuer},
		{name: "expired", token: hs256(currentKey, set("exp", testNow.Unix()-60)), wantErr: qstash.ErrTokenExpired},
		{name: "nbf in the future", token: hs256(currentKey, set("nbf", testNow.Unix()+120)), wantErr: qstash.ErrTokenNotYetValid},
		{name: "iat in the future", token: hs256(currentKey, set("iat", testNow.Unix()+120)), wantErr: qstash.ErrTokenNotYetValid, sdkAccepts: true},
		{name: "exp as a string", token: hs256(currentKey, set("exp", "1900000300")), wantErr: qstash.ErrMalformedToken},
		{name: "alg none", token: func(t *testing.T, body []byte) string {
			return mint(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(body, endpointURL))
		}, wantErr: qstash.ErrUnsupportedAlgorithm},
		{name: "alg none with a copied HS256 signature", token: func(t *testing.T, body []byte) string {
			good := hs256(currentKey, nil)(t, body)
			hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
			return hdr + good[strings.Index(good, "."):]
		}, wantErr: qstash.ErrUnsupportedAlgorithm},
		{name: "RS256", token: func(t *testing.T, body []byte) string {
			key, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				t.Fatal(err)
			}
			return mint(t, jwt.SigningMethodRS256, key, claims(body, endpointURL))
		}, wantErr: qstash.ErrUnsupportedAlgorithm},
		{name: "HS512 with the right key", token: func(t *testing.T, body []byte) string {
			return mint(t, jwt.SigningMethodHS512, []byte(currentKey), claims(body, endpointURL))
		}, wantErr: qstash.ErrUnsupportedAlgorithm, sdkAccepts: true},
		{name: "HS384 with the right key", token: func(t *testing.T, body []byte) string {
			return mint(t, jwt.SigningMethodHS384, []byte(currentKey), claims(body, endpointURL))
		}, wantErr: qstash.ErrUnsupportedAlgorithm, sdkAccepts: true},
		{name: "missing header", token: func(*testing.T, []byte) string { return "" }, wantErr: qstash.ErrMissingSignature},
		{name: "garbage", token: func(*testing.T, []byte) string { return "not-a-jwt" }, wantErr: qstash.ErrMalformedToken},
		{name: "four parts", token: func(t *testing.T, body []byte) string { return hs256(currentKey, nil)(t, body) + ".x" }, wantErr: qstash.ErrMalformedToken},
		{name: "padded signature", token: func(t *testing.T, body []byte) string { return hs256(currentKey, nil)(t, body) + "=" }, wantErr: qstash.ErrMalformedToken},
		{name: "truncated signature", token: func(t *testing.T, body []byte) string {
			tok := hs256(currentKey, nil)(t, body)
			return tok[:len(tok)-2]
		}, wantErr: qstash.ErrMalformedToken},
		{name: "oversized", token: func(*testing.T, []byte) string { return strings.Repeat("a", 10<<10) }, wantErr: qstash.ErrMalformedToken},
	}
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
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token(t, body)
			err := v.Verify(tok, body, endpointURL)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
			} else {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, qstash.ErrInvalidSignature) {
					t.Fatalf("Verify = %v, want %v (matching ErrInvalidSignature)", err, tc.wantErr)
				}
				var ve *qstash.VerificationError
				if !errors.As(err, &ve) || ve.Reason != tc.wantErr {
					t.Fatalf("Verify = %#v, want a *VerificationError with Reason %v", err, tc.wantErr)
				}
			}

			// The official SDK's verdict on the same input, at the real time
			// (it has no clock option), so time-based rows are skipped.
			if strings.Contains(tc.name, "expired") || strings.Contains(tc.name, "nbf") || strings.Contains(tc.name, "iat") || strings.Contains(tc.name, "exp as") {
				return
			}
			cur := currentKey
			if tc.sdkCurrentKey != nil {
				cur = *tc.sdkCurrentKey
			}
			sdkErr := sdk.NewReceiver(cur, nextKey).Verify(sdk.VerifyOptions{
				Signature: tok, Body: string(body), Url: endpointURL, Tolerance: 10 * 365 * 24 * time.Hour, // tokens are minted at testNow
			})
			if got := sdkErr == nil; got != tc.sdkAccepts {
				t.Errorf("SDK Verify = %v; the matrix says the SDK accepts: %v", sdkErr, tc.sdkAccepts)
			}
		})
	}
}

// TestVerifierAgreesWithSDK checks, at the real time, that the official
// SDK accepts what our Signer mints and that the SDK's own weaknesses exist as
// the matrix says: tokens without exp, and tokens signed with an empty key
// when a key is unset.
func TestVerifierAgreesWithSDK(t *testing.T) {
	t.Parallel()
	body := []byte(`{"hello":"world"}`)
	tok, err := qstash.Signer{Key: currentKey}.Sign(body, endpointURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := sdk.NewReceiver(currentKey, nextKey).Verify(sdk.VerifyOptions{Signature: tok, Body: string(body), Url: endpointURL}); err != nil {
		t.Fatalf("SDK refuses a token our Signer minted: %v", err)
	}
	ours, err := qstash.NewVerifier(&qstash.VerifierConfig{CurrentSigningKey: currentKey, NextSigningKey: nextKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := ours.Verify(tok, body, endpointURL); err != nil {
		t.Fatalf("our Verifier refuses our Signer's token: %v", err)
	}

	now := time.Now().Unix()
	sum := sha256.Sum256(body)
	noExp := jwt.MapClaims{"iss": "Upstash", "sub": endpointURL, "iat": now, "nbf": now, "body": base64.URLEncoding.EncodeToString(sum[:])}
	noExpTok := mint(t, jwt.SigningMethodHS256, []byte(currentKey), noExp)
	if err := sdk.NewReceiver(currentKey, nextKey).Verify(sdk.VerifyOptions{Signature: noExpTok, Body: string(body), Url: endpointURL}); err != nil {
		t.Errorf("the SDK refuses a token without exp (%v): update the matrix, it got stricter", err)
	}
	if err := ours.Verify(noExpTok, body, endpointURL); !errors.Is(err, qstash.ErrMissingExpiry) {
		t.Errorf("our Verify(no exp) = %v, want ErrMissingExpiry", err)
	}

	withExp := with(noExp, "exp", now+300)
	emptyKeyTok := mint(t, jwt.SigningMethodHS256, []byte(""), withExp)
	if err := sdk.NewReceiver("", nextKey).Verify(sdk.VerifyOptions{Signature: emptyKeyTok, Body: string(body), Url: endpointURL}); err != nil {
		t.Errorf("the SDK with an unset current key refuses an empty-key token (%v): update the matrix", err)
	}
	if err := ours.Verify(emptyKeyTok, body, endpointURL); !errors.Is(err, qstash.ErrSignatureMismatch) {
		t.Errorf("our Verify(empty key) = %v, want ErrSignatureMismatch", err)
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
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, d := &effects{}, &recordingDeduper{}
			rc, decisions := newTestReceiver(t, h, d)
			e := testEvent(t)
			w := serve(rc, deliveryRequest(e, tc.token(t, deliveryBody(t, e))))
			if tc.wantErr == nil {
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
			if got := *decisions; len(got) != 1 || got[0].Outcome != qstash.OutcomeUnauthorized || !errors.Is(got[0].Err, tc.wantErr) {
				t.Fatalf("decisions = %+v, want one OutcomeUnauthorized with %v", got, tc.wantErr)
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
