package qstash_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// FuzzVerify checks that verification never panics and never accepts
// tampered input: a token minted for (body, url) verifies, and no change of
// one character of it, of the body or of the URL does; an arbitrary token is
// accepted only if it is genuinely signed with one of the keys.
// Seeds: testdata/fuzz/FuzzVerify.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"order":"o-1"}`), endpointURL, "not-a-jwt", uint16(0))
	f.Add([]byte{}, "", "", uint16(7))
	f.Fuzz(func(t *testing.T, body []byte, url, token string, pos uint16) {
		v := newTestVerifier(t)

		// Arbitrary input: must not panic; acceptance needs a real signature.
		if err := v.Verify(token, body, url); err == nil {
			if !signedByUs(token) {
				t.Fatalf("accepted a token not signed with either key: %q", token)
			}
		} else if !errors.Is(err, qstash.ErrInvalidSignature) {
			t.Fatalf("error %v does not match ErrInvalidSignature", err)
		}

		// A genuine token for (body, url).
		good, err := qstash.Signer{Key: nextKey, Clock: fixedClock{testNow}}.Sign(body, url)
		if err != nil {
			t.Fatal(err)
		}
		err = v.Verify(good, body, url)
		switch {
		case url == "" && !errors.Is(err, qstash.ErrInvalidSubject):
			t.Fatalf("empty URL: Verify = %v, want ErrInvalidSubject", err)
		case url != "" && utf8.ValidString(url) && err != nil:
			t.Fatalf("genuine token refused: %v", err)
		}

		// Tampering with anything must be refused.
		if v.Verify(good, append(bytes.Clone(body), 'x'), url) == nil {
			t.Fatal("accepted a token for a different body")
		}
		if v.Verify(good, body, url+"/") == nil {
			t.Fatal("accepted a token for a different URL")
		}
		i := int(pos) % len(good)
		for _, c := range []byte("A_-.=0") {
			if c == good[i] {
				continue
			}
			tampered := good[:i] + string(c) + good[i+1:]
			if v.Verify(tampered, body, url) == nil {
				t.Fatalf("accepted a token with character %d changed from %q to %q", i, good[i], c)
			}
		}
	})
}

// signedByUs checks a token with golang-jwt, independently of our parser.
func signedByUs(token string) bool {
	for _, key := range []string{currentKey, nextKey} {
		_, err := jwt.Parse(token, func(*jwt.Token) (any, error) { return []byte(key), nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithoutClaimsValidation())
		if err == nil {
			return true
		}
	}
	return false
}

// FuzzDecodeHeaders checks that decoding delivery headers never panics, that
// whatever decodes is a valid event, and that a decoded event survives
// another trip through CloudEvents headers unchanged.
// Seeds: testdata/fuzz/FuzzDecodeHeaders.
func FuzzDecodeHeaders(f *testing.F) {
	f.Add("ce-specversion: 1.0\nce-id: 0190b6c2-7a6f-7cc4-9b5f-3c3f1f0e8a11\nce-type: order.confirmed\nce-source: shop", []byte(`{"a":1}`))
	f.Add("ce-id: x", []byte(`{}`))
	f.Fuzz(func(t *testing.T, block string, body []byte) {
		h := http.Header{}
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, ":")
			// Raw assignment, not Set: hand-built maps reach DecodeEvent too.
			h[k] = append(h[k], strings.TrimLeft(v, " "))
		}
		e, err := qstash.DecodeEvent(h, body)
		if err != nil {
			if !errors.Is(err, core.ErrInvalidEvent) {
				t.Fatalf("error %v does not match core.ErrInvalidEvent", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded an invalid event: %v", err)
		}
		h2 := http.Header{}
		for k, v := range core.CloudEventHeaders(e) {
			h2.Set(k, v)
		}
		e2, err := qstash.DecodeEvent(h2, body)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v\n%v", err, h2)
		}
		if e2.ID != e.ID || e2.Type != e.Type || e2.Source != e.Source || e2.AggregateType != e.AggregateType ||
			e2.AggregateID != e.AggregateID || e2.Sequence != e.Sequence || e2.SchemaVersion != e.SchemaVersion ||
			!e2.CreatedAt.Equal(e.CreatedAt) || !bytes.Equal(e2.Payload, e.Payload) || len(e2.Headers) != len(e.Headers) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, e2)
		}
		for k, v := range e.Headers {
			if e2.Headers[k] != v {
				t.Fatalf("round trip changed header %q: %q → %q", k, v, e2.Headers[k])
			}
		}
	})
}
