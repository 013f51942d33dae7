package qstashdev

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The Upstash-Signature JWT is built by hand rather than with a JWT library:
// it is one fixed header and seven claims, and signing sits on the delivery
// hot path (one signature per attempt), where a pooled HMAC and an
// append-based encoder keep it to a few allocations.

// jwtHeader is base64url(`{"alg":"HS256","typ":"JWT"}`).
const jwtHeader = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"

// jwtLifetime is QStash's token lifetime: exp = iat + 300.
const jwtLifetime = 300 * time.Second

// signer signs with one key. Rotation swaps the whole signer, so a pool never
// mixes keys.
type signer struct {
	key  string
	pool sync.Pool // of hash.Hash (HMAC-SHA256 keyed with key)
}

func newSigner(key string) *signer {
	s := &signer{key: key}
	// The key is the whole signing-key string as bytes, "sig_" included:
	// that is what every QStash verifier uses.
	s.pool.New = func() any { return hmac.New(sha256.New, []byte(key)) }
	return s
}

// sign returns the Upstash-Signature for a delivery of body to url.
func (s *signer) sign(url string, body []byte, now time.Time) string {
	sum := sha256.Sum256(body)
	iat := now.Unix()

	buf := make([]byte, 0, 256+len(url))
	buf = append(buf, `{"body":"`...)
	// base64url WITH '=' padding, as QStash emits it.
	buf = base64.URLEncoding.AppendEncode(buf, sum[:])
	buf = append(buf, `","exp":`...)
	buf = strconv.AppendInt(buf, iat+int64(jwtLifetime/time.Second), 10)
	buf = append(buf, `,"iat":`...)
	buf = strconv.AppendInt(buf, iat, 10)
	buf = append(buf, `,"iss":"Upstash","jti":"jwt_`...)
	buf = appendRandomBase62(buf, 20)
	buf = append(buf, '"')
	// nbf = iat: QStash's exact choice is unsettled (0 or iat); every SDK
	// accepts both, and iat is the stricter reading.
	buf = append(buf, `,"nbf":`...)
	buf = strconv.AppendInt(buf, iat, 10)
	buf = append(buf, `,"sub":`...)
	buf = appendJSONString(buf, url)
	buf = append(buf, '}')

	enc := base64.RawURLEncoding
	out := make([]byte, 0, len(jwtHeader)+1+enc.EncodedLen(len(buf))+1+enc.EncodedLen(sha256.Size))
	out = append(out, jwtHeader...)
	out = append(out, '.')
	out = enc.AppendEncode(out, buf)

	h := s.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(out)
	var mac [sha256.Size]byte
	h.Sum(mac[:0])
	s.pool.Put(h)

	out = append(out, '.')
	out = enc.AppendEncode(out, mac[:])
	return string(out)
}

// appendJSONString appends s as a JSON string. URLs and ids are plain ASCII
// in practice; anything unusual goes through encoding/json so the claim is
// always valid JSON.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			b, _ := json.Marshal(s)
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
