package sigmatrix

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outboxkit/outboxkit/qstash"
)

// Target is what the matrix's tokens are minted for: the receiver's signing
// keys and endpoint URL, and the time its clock reads.
type Target struct {
	CurrentKey string
	NextKey    string
	URL        string
	Now        time.Time
}

// Case is one row of the matrix.
type Case struct {
	Name string
	// Token mints the row's Upstash-Signature for body ("" for none).
	Token func(t testing.TB, body []byte) string
	// WantErr is the sentinel qstash.Verifier reports; nil means accepted.
	WantErr error
	// SDKAccepts is what the official SDK v1.0.0 verifier does with the
	// same token, body and URL. SDKCurrentKey, when set, replaces the SDK's
	// current key.
	SDKAccepts    bool
	SDKCurrentKey *string
	// SkipSDK leaves the row out of the SDK comparison: the SDK verifies at
	// the real time (it has no clock option), and these rows turn on time
	// claims minted around Target.Now.
	SkipSDK bool
}

// Cases returns the matrix for tg.
func Cases(tg Target) []Case {
	empty := ""
	now := tg.Now.Unix()
	hs256 := func(key string, mut func(jwt.MapClaims) jwt.MapClaims) func(testing.TB, []byte) string {
		return func(t testing.TB, body []byte) string {
			c := Claims(body, tg.URL, tg.Now)
			if mut != nil {
				c = mut(c)
			}
			return Mint(t, jwt.SigningMethodHS256, []byte(key), c)
		}
	}
	set := func(k string, v any) func(jwt.MapClaims) jwt.MapClaims {
		return func(c jwt.MapClaims) jwt.MapClaims { return With(c, k, v) }
	}
	return []Case{
		{Name: "valid, current key", Token: hs256(tg.CurrentKey, nil), SDKAccepts: true},
		{Name: "valid, next key (rotation)", Token: hs256(tg.NextKey, nil), SDKAccepts: true},
		{Name: "body hash without padding", Token: hs256(tg.CurrentKey, func(c jwt.MapClaims) jwt.MapClaims {
			return With(c, "body", strings.TrimRight(c["body"].(string), "="))
		}), SDKAccepts: true},
		{Name: "nbf 0, as QStash may send", Token: hs256(tg.CurrentKey, set("nbf", 0)), SDKAccepts: true, SkipSDK: true},
		{Name: "nbf slightly ahead, within leeway", Token: hs256(tg.CurrentKey, set("nbf", now+3)), SDKAccepts: false, SkipSDK: true},

		{Name: "signed with an empty key", Token: hs256("", nil), WantErr: qstash.ErrSignatureMismatch,
			SDKAccepts: true, SDKCurrentKey: &empty},
		{Name: "no exp", Token: hs256(tg.CurrentKey, set("exp", nil)), WantErr: qstash.ErrMissingExpiry, SDKAccepts: true},
		{Name: "tampered body", Token: func(t testing.TB, body []byte) string {
			return hs256(tg.CurrentKey, nil)(t, append([]byte(`{"x":1}`), body...))
		}, WantErr: qstash.ErrBodyMismatch},
		{Name: "no body claim", Token: hs256(tg.CurrentKey, set("body", nil)), WantErr: qstash.ErrBodyMismatch},
		{Name: "wrong key", Token: hs256("sig_someoneElsesKey000000000000", nil), WantErr: qstash.ErrSignatureMismatch},
		{Name: "wrong sub", Token: hs256(tg.CurrentKey, set("sub", "https://consumer.example.com/qstash/other")), WantErr: qstash.ErrInvalidSubject},
		{Name: "sub with trailing slash", Token: hs256(tg.CurrentKey, set("sub", tg.URL+"/")), WantErr: qstash.ErrInvalidSubject},
		{Name: "no sub", Token: hs256(tg.CurrentKey, set("sub", nil)), WantErr: qstash.ErrInvalidSubject},
		{Name: "wrong issuer", Token: hs256(tg.CurrentKey, set("iss", "Mallory")), WantErr: qstash.ErrInvalidIssuer},
		{Name: "expired", Token: hs256(tg.CurrentKey, set("exp", now-60)), WantErr: qstash.ErrTokenExpired, SkipSDK: true},
		{Name: "nbf in the future", Token: hs256(tg.CurrentKey, set("nbf", now+120)), WantErr: qstash.ErrTokenNotYetValid, SkipSDK: true},
		{Name: "iat in the future", Token: hs256(tg.CurrentKey, set("iat", now+120)), WantErr: qstash.ErrTokenNotYetValid, SDKAccepts: true, SkipSDK: true},
		{Name: "exp as a string", Token: hs256(tg.CurrentKey, set("exp", strconv.FormatInt(now+300, 10))), WantErr: qstash.ErrMalformedToken, SkipSDK: true},
		{Name: "alg none", Token: func(t testing.TB, body []byte) string {
			return Mint(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, Claims(body, tg.URL, tg.Now))
		}, WantErr: qstash.ErrUnsupportedAlgorithm},
		{Name: "alg none with a copied HS256 signature", Token: func(t testing.TB, body []byte) string {
			good := hs256(tg.CurrentKey, nil)(t, body)
			hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
			return hdr + good[strings.Index(good, "."):]
		}, WantErr: qstash.ErrUnsupportedAlgorithm},
		{Name: "RS256", Token: func(t testing.TB, body []byte) string {
			key, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				t.Fatal(err)
			}
			return Mint(t, jwt.SigningMethodRS256, key, Claims(body, tg.URL, tg.Now))
		}, WantErr: qstash.ErrUnsupportedAlgorithm},
		{Name: "HS512 with the right key", Token: func(t testing.TB, body []byte) string {
			return Mint(t, jwt.SigningMethodHS512, []byte(tg.CurrentKey), Claims(body, tg.URL, tg.Now))
		}, WantErr: qstash.ErrUnsupportedAlgorithm, SDKAccepts: true},
		{Name: "HS384 with the right key", Token: func(t testing.TB, body []byte) string {
			return Mint(t, jwt.SigningMethodHS384, []byte(tg.CurrentKey), Claims(body, tg.URL, tg.Now))
		}, WantErr: qstash.ErrUnsupportedAlgorithm, SDKAccepts: true},
		{Name: "missing header", Token: func(testing.TB, []byte) string { return "" }, WantErr: qstash.ErrMissingSignature},
		{Name: "garbage", Token: func(testing.TB, []byte) string { return "not-a-jwt" }, WantErr: qstash.ErrMalformedToken},
		{Name: "four parts", Token: func(t testing.TB, body []byte) string { return hs256(tg.CurrentKey, nil)(t, body) + ".x" }, WantErr: qstash.ErrMalformedToken},
		{Name: "padded signature", Token: func(t testing.TB, body []byte) string { return hs256(tg.CurrentKey, nil)(t, body) + "=" }, WantErr: qstash.ErrMalformedToken},
		{Name: "truncated signature", Token: func(t testing.TB, body []byte) string {
			tok := hs256(tg.CurrentKey, nil)(t, body)
			return tok[:len(tok)-2]
		}, WantErr: qstash.ErrMalformedToken},
		{Name: "oversized", Token: func(testing.TB, []byte) string { return strings.Repeat("a", 10<<10) }, WantErr: qstash.ErrMalformedToken},
	}
}

var tokenSeq atomic.Int64

// Claims returns the claims QStash signs for body sent to url at now, valid
// for five minutes, with a jti of their own.
func Claims(body []byte, url string, now time.Time) jwt.MapClaims {
	sum := sha256.Sum256(body)
	return jwt.MapClaims{
		"iss":  "Upstash",
		"sub":  url,
		"iat":  now.Unix(),
		"nbf":  now.Unix(),
		"exp":  now.Unix() + 300,
		"jti":  "jwt_matrix_" + strconv.FormatInt(tokenSeq.Add(1), 10),
		"body": base64.URLEncoding.EncodeToString(sum[:]),
	}
}

// Mint signs c with golang-jwt, failing the test on error.
func Mint(t testing.TB, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// With returns a copy of c with claim k set to v, or removed when v is nil.
func With(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := maps.Clone(c)
	if out == nil {
		out = jwt.MapClaims{}
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}
