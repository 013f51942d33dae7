package qstash

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// TokenLifetime is how long QStash's signatures are valid.
const TokenLifetime = 5 * time.Minute

// Signer mints Upstash-Signature tokens the way QStash does. It exists for
// tests of consumer endpoints (and of the Watermill subscriber) that need
// signed requests without a QStash server; qstashdev signs its deliveries
// itself.
type Signer struct {
	// Key is the signing key, the whole string including "sig_". Required.
	Key string
	// Clock tells the time for iat, nbf and exp. Defaults to
	// core.SystemClock.
	Clock core.Clock
}

// Sign returns a token for a request to url carrying body: HS256 over
// iss "Upstash", sub url, iat and nbf now, exp now + TokenLifetime, a random
// jti, and body = base64url(SHA-256(body)) with = padding, as QStash writes
// it.
func (s Signer) Sign(body []byte, url string) (string, error) {
	if s.Key == "" {
		return "", errors.New("qstash: Signer.Key is empty")
	}
	clock := s.Clock
	if clock == nil {
		clock = core.SystemClock{}
	}
	now := clock.Now().Unix()
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	claims, err := json.Marshal(struct {
		Iss  string `json:"iss"`
		Sub  string `json:"sub"`
		Exp  int64  `json:"exp"`
		Nbf  int64  `json:"nbf"`
		Iat  int64  `json:"iat"`
		Jti  string `json:"jti"`
		Body string `json:"body"`
	}{"Upstash", url, now + int64(TokenLifetime/time.Second), now, now, "jwt_" + hex.EncodeToString(jti[:]), base64.URLEncoding.EncodeToString(sum[:])})
	if err != nil {
		return "", err
	}
	const header = `{"alg":"HS256","typ":"JWT"}`
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(claims)
	m := hmac.New(sha256.New, []byte(s.Key))
	m.Write([]byte(signed))
	return signed + "." + enc.EncodeToString(m.Sum(nil)), nil
}
