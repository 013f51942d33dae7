package qstashsdk_test

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/upstash/qstash-go"

	"github.com/outboxkit/outboxkit/internal/sigmatrix"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The keys are QStash's format (the local dev server's defaults, as in the
// qstash package's tests); tokens are minted at a fixed time so the rows
// stay what they say however long the tests live.
var (
	currentKey  = qstashdev.DefaultCurrentSigningKey
	nextKey     = qstashdev.DefaultNextSigningKey
	endpointURL = "https://consumer.example.com/qstash/orders"
	target      = sigmatrix.Target{CurrentKey: currentKey, NextKey: nextKey, URL: endpointURL, Now: time.Unix(1_900_000_000, 0)}
)

// TestSDKVerifyMatrix sends every row of the signature matrix to the
// official SDK's verifier and checks the SDK's verdict is what the matrix
// says: where the SDK is weaker than qstash.Verifier stays documented, and
// a change in the SDK fails here. (qstash's TestVerifyMatrix checks our
// Verifier's verdict on the same rows.)
func TestSDKVerifyMatrix(t *testing.T) {
	t.Parallel()
	body := []byte(`{"order":"o-1","total":42}`)
	compared := 0
	for _, tc := range sigmatrix.Cases(target) {
		if tc.SkipSDK {
			continue
		}
		compared++
		t.Run(tc.Name, func(t *testing.T) {
			tok := tc.Token(t, body)
			cur := currentKey
			if tc.SDKCurrentKey != nil {
				cur = *tc.SDKCurrentKey
			}
			// The SDK has no clock option: it checks at the real time, so
			// the tolerance spans the distance to target.Now.
			sdkErr := sdk.NewReceiver(cur, nextKey).Verify(sdk.VerifyOptions{
				Signature: tok, Body: string(body), Url: endpointURL, Tolerance: 10 * 365 * 24 * time.Hour,
			})
			if got := sdkErr == nil; got != tc.SDKAccepts {
				t.Errorf("SDK Verify = %v; the matrix says the SDK accepts: %v", sdkErr, tc.SDKAccepts)
			}
		})
	}
	if compared == 0 {
		t.Fatal("no row of the matrix was compared: the test would prove nothing")
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
	noExpTok := sigmatrix.Mint(t, jwt.SigningMethodHS256, []byte(currentKey), noExp)
	if err := sdk.NewReceiver(currentKey, nextKey).Verify(sdk.VerifyOptions{Signature: noExpTok, Body: string(body), Url: endpointURL}); err != nil {
		t.Errorf("the SDK refuses a token without exp (%v): update the matrix, it got stricter", err)
	}
	if err := ours.Verify(noExpTok, body, endpointURL); !errors.Is(err, qstash.ErrMissingExpiry) {
		t.Errorf("our Verify(no exp) = %v, want ErrMissingExpiry", err)
	}

	withExp := sigmatrix.With(noExp, "exp", now+300)
	emptyKeyTok := sigmatrix.Mint(t, jwt.SigningMethodHS256, []byte(""), withExp)
	if err := sdk.NewReceiver("", nextKey).Verify(sdk.VerifyOptions{Signature: emptyKeyTok, Body: string(body), Url: endpointURL}); err != nil {
		t.Errorf("the SDK with an unset current key refuses an empty-key token (%v): update the matrix", err)
	}
	if err := ours.Verify(emptyKeyTok, body, endpointURL); !errors.Is(err, qstash.ErrSignatureMismatch) {
		t.Errorf("our Verify(empty key) = %v, want ErrSignatureMismatch", err)
	}
}
