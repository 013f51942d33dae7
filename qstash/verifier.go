package qstash

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/qregion"
)

// Signature verification errors. Every error Verify returns matches
// ErrInvalidSignature and, with errors.Is, the sentinel naming the reason.
var (
	// ErrInvalidSignature is matched by every verification failure.
	ErrInvalidSignature = errors.New("qstash: invalid signature")
	// ErrMissingSignature: the request has no Upstash-Signature header.
	ErrMissingSignature = errors.New("qstash: missing Upstash-Signature")
	// ErrMalformedToken: not a compact JWT (three base64url parts, JSON
	// header and claims, claims of the right types).
	ErrMalformedToken = errors.New("qstash: malformed signature token")
	// ErrUnsupportedAlgorithm: the token's alg is not HS256 (none, HS384,
	// HS512, RS256, ... are all refused).
	ErrUnsupportedAlgorithm = errors.New("qstash: signature algorithm is not HS256")
	// ErrSignatureMismatch: the HMAC matches neither signing key.
	ErrSignatureMismatch = errors.New("qstash: signature matches neither signing key")
	// ErrInvalidIssuer: iss is not "Upstash".
	ErrInvalidIssuer = errors.New(`qstash: token issuer is not "Upstash"`)
	// ErrInvalidSubject: sub is not the endpoint's configured URL.
	ErrInvalidSubject = errors.New("qstash: token subject is not this endpoint's URL")
	// ErrMissingExpiry: the token has no exp claim.
	ErrMissingExpiry = errors.New("qstash: token has no expiry")
	// ErrTokenExpired: exp has passed (beyond the leeway).
	ErrTokenExpired = errors.New("qstash: token expired")
	// ErrTokenNotYetValid: nbf or iat lies in the future (beyond the leeway).
	ErrTokenNotYetValid = errors.New("qstash: token not valid yet")
	// ErrBodyMismatch: the body claim is missing or is not the SHA-256 of the
	// request body.
	ErrBodyMismatch = errors.New("qstash: body does not match the signed hash")
	// ErrMissingTokenID: the token has no jti claim, which QStash always
	// sets; without it a replay cannot be told from a new delivery.
	ErrMissingTokenID = errors.New("qstash: token has no jti")
	// ErrTokenReplayed: the token was already accepted (its jti is in the
	// ReplayGuard). QStash signs every attempt anew, so this is a captured
	// delivery sent again.
	ErrTokenReplayed = errors.New("qstash: token already used")
	// ErrUnknownRegion: the delivery's Upstash-Region names a region whose
	// keys the verifier does not hold, or none, and the verifier has no
	// default keys to fall back on.
	ErrUnknownRegion = errors.New("qstash: no signing keys for the delivery's region")
)

// VerificationError is the error Verify returns. It matches
// ErrInvalidSignature and unwraps to the sentinel naming the reason.
type VerificationError struct {
	// Reason is one of the sentinels above, such as ErrTokenExpired.
	Reason error
	// Detail says more, for logs. It never contains a key or the token.
	Detail string
}

// Error returns the reason and the detail.
func (e *VerificationError) Error() string {
	if e.Detail == "" {
		return e.Reason.Error()
	}
	return e.Reason.Error() + ": " + e.Detail
}

// Is makes errors.Is(err, ErrInvalidSignature) true for every failure.
func (e *VerificationError) Is(target error) bool { return target == ErrInvalidSignature }

// Unwrap returns Reason.
func (e *VerificationError) Unwrap() error { return e.Reason }

func verr(reason error, format string, args ...any) error {
	return &VerificationError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// DefaultLeeway is the clock skew tolerated on exp, nbf and iat: enough for
// hosts whose clocks drift by a few seconds, small against QStash's 5-minute
// token lifetime.
const DefaultLeeway = 5 * time.Second

// macB64Len is the length of an unpadded base64url HMAC-SHA256.
const macB64Len = 43

// maxTokenBytes bounds the header value parsed; QStash's tokens are ~400 bytes.
const maxTokenBytes = 8 << 10

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// CurrentSigningKey is QStash's current signing key
	// (QSTASH_CURRENT_SIGNING_KEY), the whole string including "sig_".
	// Required, unless Regions is set.
	CurrentSigningKey string
	// NextSigningKey is QStash's next signing key (QSTASH_NEXT_SIGNING_KEY),
	// accepted so that deliveries keep verifying while keys rotate.
	// Required, unless Regions is set.
	NextSigningKey string
	// Regions holds the signing keys of each QStash region an endpoint
	// receives from (QStash's regions are independent, each with keys of
	// its own), by region name: "EU_CENTRAL_1", "US_EAST_1" (dashes and
	// lower case are read too). VerifyRegionToken picks the keys of the
	// region a delivery's Upstash-Region header names. A delivery without
	// the header, or from a region not listed, is verified with
	// CurrentSigningKey and NextSigningKey when they are set, and refused
	// (ErrUnknownRegion) when they are not. Defaults to none: every
	// delivery is verified with CurrentSigningKey and NextSigningKey.
	Regions map[string]RegionKeys
	// Leeway is the clock skew tolerated on exp, nbf and iat. Defaults to
	// DefaultLeeway; a negative value means none. At most one minute.
	Leeway time.Duration
	// Clock tells the time for exp, nbf and iat. Defaults to
	// core.SystemClock; tests pass a coretest.FakeClock.
	Clock core.Clock
}

// Verifier checks QStash's Upstash-Signature tokens strictly. It is safe for
// concurrent use.
//
// A token is accepted only if all of this holds: it is a compact JWT whose
// header says alg HS256 (nothing else: "none" and the other HMAC and RSA
// algorithms are refused, so no algorithm-confusion trick applies); its
// HMAC-SHA256 matches the current or the next signing key (compared in
// constant time); iss is "Upstash"; sub is exactly the URL the caller expects
// (a token minted for another endpoint of the same account cannot be
// replayed here); exp is present and not past; nbf and iat, when present, are
// not in the future; and the body claim is the base64url SHA-256 of the exact
// request body. Each check allows for Leeway of clock skew.
//
// The official Go SDK's verifier (v1.0.0) is weaker: it accepts any HS*
// algorithm, tokens without exp, any sub when no URL is given, and tokens
// signed with an empty key when a key variable is unset. This one refuses
// them all, and refuses empty keys at construction.
//
// It parses the token itself rather than through a JWT library: the format
// is fixed by QStash, so the whole rule set fits on one screen with no
// library defaults to switch off (golang-jwt/jwt/v5, for one, treats exp as
// optional unless asked), and verification allocates little on a hot path.
// The tests check it against golang-jwt and the official SDK.
type Verifier struct {
	keys       *[2]hmacPool // the default keys; nil with Regions only
	regionKeys map[string]*[2]hmacPool
	leeway     time.Duration
	clock      core.Clock
}

// RegionKeys are the signing keys of one QStash region
// (<REGION>_QSTASH_CURRENT_SIGNING_KEY and _NEXT_SIGNING_KEY, in Upstash's
// multi-region environment variables). Both are required.
type RegionKeys struct {
	Current string
	Next    string
}

// hmacPool recycles keyed HMAC states: Reset returns one to its keyed state,
// which saves hashing the key on every request.
type hmacPool struct{ p sync.Pool }

func newHMACPool(key string) hmacPool {
	k := []byte(key)
	return hmacPool{p: sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}}
}

// NewVerifier validates cfg and returns a Verifier. Empty keys are refused:
// an unset environment variable must not turn into a key anyone can sign
// with.
func NewVerifier(cfg *VerifierConfig) (*Verifier, error) {
	if cfg == nil {
		return nil, &core.ConfigError{Field: "VerifierConfig", Reason: "is nil: pass the current and next signing keys"}
	}
	v := &Verifier{}
	if len(cfg.Regions) == 0 || cfg.CurrentSigningKey != "" || cfg.NextSigningKey != "" {
		if err := validateSigningKey("CurrentSigningKey", "QSTASH_CURRENT_SIGNING_KEY", cfg.CurrentSigningKey); err != nil {
			return nil, err
		}
		if err := validateSigningKey("NextSigningKey", "QSTASH_NEXT_SIGNING_KEY", cfg.NextSigningKey); err != nil {
			return nil, err
		}
		v.keys = &[2]hmacPool{newHMACPool(cfg.CurrentSigningKey), newHMACPool(cfg.NextSigningKey)}
	}
	for name, k := range cfg.Regions {
		region, ok := qregion.Normalize(name)
		if !ok {
			return nil, &core.ConfigError{Field: "Regions", Reason: fmt.Sprintf("names %q, which is not a QStash region: use %s", name, strings.Join(qregion.All, " or "))}
		}
		if v.regionKeys[region] != nil {
			return nil, &core.ConfigError{Field: "Regions", Reason: fmt.Sprintf("names region %s twice (as %q and another spelling)", region, name)}
		}
		if err := validateSigningKey("Regions["+region+"].Current", region+"_QSTASH_CURRENT_SIGNING_KEY", k.Current); err != nil {
			return nil, err
		}
		if err := validateSigningKey("Regions["+region+"].Next", region+"_QSTASH_NEXT_SIGNING_KEY", k.Next); err != nil {
			return nil, err
		}
		if v.regionKeys == nil {
			v.regionKeys = make(map[string]*[2]hmacPool, len(cfg.Regions))
		}
		v.regionKeys[region] = &[2]hmacPool{newHMACPool(k.Current), newHMACPool(k.Next)}
	}
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultLeeway
	case leeway < 0:
		leeway = 0
	case leeway > time.Minute:
		return nil, &core.ConfigError{Field: "Leeway", Reason: fmt.Sprintf("is %s: at most 1m, tokens only live 5m; fix the hosts' clocks (NTP) instead", leeway)}
	}
	clock := cfg.Clock
	if clock == nil {
		clock = core.SystemClock{}
	}
	v.leeway, v.clock = leeway, clock
	return v, nil
}

func validateSigningKey(field, env, key string) error {
	if key == "" {
		return &core.ConfigError{Field: field, Reason: "is empty: set it from " + env + " (Upstash console → QStash → Signing keys); an empty key would accept tokens anyone can sign"}
	}
	if strings.TrimSpace(key) != key {
		return &core.ConfigError{Field: field, Reason: "has leading or trailing whitespace: check for a newline in the environment variable or secret"}
	}
	return nil
}

// tokenHeader is the JOSE header of a token.
type tokenHeader struct {
	Alg  string          `json:"alg"`
	Typ  *string         `json:"typ"`
	Crit json.RawMessage `json:"crit"`
}

// tokenClaims are the claims QStash signs. Numeric dates are float64 so a
// string where a number belongs fails to decode; pointers tell absent from 0.
type tokenClaims struct {
	Iss  string   `json:"iss"`
	Jti  *string  `json:"jti"`
	Sub  *string  `json:"sub"`
	Exp  *float64 `json:"exp"`
	Nbf  *float64 `json:"nbf"`
	Iat  *float64 `json:"iat"`
	Body *string  `json:"body"`
}

// strictB64 decodes unpadded base64url and refuses non-zero trailing bits, so
// each token has exactly one valid spelling: changing any character of an
// accepted token changes the signed bytes or the signature.
var strictB64 = base64.RawURLEncoding.Strict()

// Claims are what a verified token asserts.
type Claims struct {
	// ID is the jti claim, QStash's unique ID for the token ("" if absent).
	// A ReplayGuard records it.
	ID string
	// Subject is the sub claim: the URL the delivery was addressed to.
	Subject string
	// IssuedAt is the iat claim (zero if absent); Expires the exp claim.
	IssuedAt time.Time
	Expires  time.Time
}

// maxTokenIDBytes bounds the jti a ReplayGuard records; QStash's are about 30
// bytes.
const maxTokenIDBytes = 256

// Verify checks token, the value of an Upstash-Signature header, against the
// raw request body and the URL the endpoint is published under (the sub
// claim). It returns nil or a *VerificationError.
func (v *Verifier) Verify(token string, body []byte, url string) error {
	_, err := v.VerifyToken(token, body, url)
	return err
}

// VerifyToken is Verify, returning the claims of a token that verifies.
// Signature verification says nothing about whether the token was used
// before: a Receiver records Claims.ID in its ReplayGuard for that.
func (v *Verifier) VerifyToken(token string, body []byte, url string) (Claims, error) {
	return v.VerifyRegionToken(token, body, url, "")
}

// VerifyRegionToken is VerifyToken with the keys of the QStash region that
// region, the delivery's Upstash-Region header, names (see
// VerifierConfig.Regions): a region without keys of its own, or "", gets
// the default keys. The header is not signed, so it only chooses among
// keys the verifier trusts anyway: a token passes only if one of them
// signed it.
func (v *Verifier) VerifyRegionToken(token string, body []byte, url, region string) (Claims, error) {
	keys := v.keys
	if len(v.regionKeys) > 0 {
		if r, ok := qregion.Normalize(region); ok && v.regionKeys[r] != nil {
			keys = v.regionKeys[r]
		}
	}
	if keys == nil {
		return Claims{}, verr(ErrUnknownRegion, "Upstash-Region is %q: configure the region's keys in Regions, or default keys", truncate(region))
	}
	cl, err := v.verify(token, body, url, keys)
	if err != nil {
		return Claims{}, err
	}
	c := Claims{Subject: *cl.Sub, Expires: unixTime(*cl.Exp)}
	if cl.Jti != nil {
		c.ID = *cl.Jti
	}
	if cl.Iat != nil {
		c.IssuedAt = unixTime(*cl.Iat)
	}
	return c, nil
}

func (v *Verifier) verify(token string, body []byte, url string, keys *[2]hmacPool) (*tokenClaims, error) {
	if token == "" {
		return nil, verr(ErrMissingSignature, "send requests through QStash, which signs them")
	}
	if len(token) > maxTokenBytes {
		return nil, verr(ErrMalformedToken, "token is %d bytes long", len(token))
	}
	h, rest, ok := strings.Cut(token, ".")
	c, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(sig, ".") {
		return nil, verr(ErrMalformedToken, "not a compact JWT (header.claims.signature)")
	}

	rawHeader, err := strictB64.DecodeString(h)
	if err != nil {
		return nil, verr(ErrMalformedToken, "header is not base64url")
	}
	var hdr tokenHeader
	if err := json.Unmarshal(rawHeader, &hdr); err != nil {
		return nil, verr(ErrMalformedToken, "header is not a JSON object")
	}
	if hdr.Alg != "HS256" {
		return nil, verr(ErrUnsupportedAlgorithm, "alg is %q", truncate(hdr.Alg))
	}
	if hdr.Typ != nil && !strings.EqualFold(*hdr.Typ, "JWT") {
		return nil, verr(ErrMalformedToken, "typ is %q, not JWT", truncate(*hdr.Typ))
	}
	if hdr.Crit != nil {
		return nil, verr(ErrMalformedToken, "header lists critical extensions, which QStash never sends")
	}

	var gotMAC [sha256.Size]byte
	if len(sig) != macB64Len {
		return nil, verr(ErrMalformedToken, "signature is not a base64url HMAC-SHA256")
	}
	if n, err := strictB64.Decode(gotMAC[:], []byte(sig)); err != nil || n != sha256.Size {
		return nil, verr(ErrMalformedToken, "signature is not a base64url HMAC-SHA256")
	}
	signed := token[:len(h)+1+len(c)]
	if !keys[0].matches(signed, gotMAC[:]) && !keys[1].matches(signed, gotMAC[:]) {
		return nil, verr(ErrSignatureMismatch, "check QSTASH_CURRENT_SIGNING_KEY and QSTASH_NEXT_SIGNING_KEY")
	}

	// The claims are authentic from here on; they can still be stale, aimed
	// at another endpoint, or about another body.
	rawClaims, err := strictB64.DecodeString(c)
	if err != nil {
		return nil, verr(ErrMalformedToken, "claims are not base64url")
	}
	var cl tokenClaims
	if err := json.Unmarshal(rawClaims, &cl); err != nil {
		return nil, verr(ErrMalformedToken, "claims are not a JSON object of the expected types")
	}
	if cl.Iss != "Upstash" {
		return nil, verr(ErrInvalidIssuer, "iss is %q", truncate(cl.Iss))
	}
	if url == "" {
		return nil, verr(ErrInvalidSubject, "the expected URL is empty: configure the endpoint's public URL")
	}
	if cl.Sub == nil || *cl.Sub != url {
		got := "<absent>"
		if cl.Sub != nil {
			got = truncate(*cl.Sub)
		}
		return nil, verr(ErrInvalidSubject, "sub is %q, this endpoint is %q", got, url)
	}

	now := v.clock.Now()
	if cl.Exp == nil {
		return nil, verr(ErrMissingExpiry, "QStash always sets exp; a token without one would be valid forever")
	}
	for _, d := range [...]*float64{cl.Exp, cl.Nbf, cl.Iat} {
		if d != nil && (math.IsNaN(*d) || math.IsInf(*d, 0) || *d < 0 || *d > 1e12) {
			return nil, verr(ErrMalformedToken, "a numeric date is out of range")
		}
	}
	exp := unixTime(*cl.Exp)
	if !now.Before(exp.Add(v.leeway)) {
		return nil, verr(ErrTokenExpired, "expired at %s, now %s", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	// QStash sends nbf as 0 or as iat (the SDKs accept both); 0 means none.
	if cl.Nbf != nil && *cl.Nbf > 0 {
		if nbf := unixTime(*cl.Nbf); now.Add(v.leeway).Before(nbf) {
			return nil, verr(ErrTokenNotYetValid, "not before %s, now %s", nbf.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
	}
	if cl.Iat != nil {
		iat := unixTime(*cl.Iat)
		if now.Add(v.leeway).Before(iat) {
			return nil, verr(ErrTokenNotYetValid, "issued at %s, in the future (now %s)", iat.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		if exp.Before(iat) {
			return nil, verr(ErrMalformedToken, "exp is before iat")
		}
	}

	if cl.Body == nil {
		return nil, verr(ErrBodyMismatch, "the token has no body claim")
	}
	// QStash's server writes the hash with = padding, while some SDK signers
	// strip it and JWT tooling never pads; the hash is the same either way,
	// so both spellings are accepted by comparing without the padding.
	sum := sha256.Sum256(body)
	var want [43]byte // unpadded base64 of 32 bytes
	base64.RawURLEncoding.Encode(want[:], sum[:])
	got := strings.TrimRight(*cl.Body, "=")
	if subtle.ConstantTimeCompare([]byte(got), want[:]) != 1 {
		return nil, verr(ErrBodyMismatch, "the body was altered or is not the one QStash signed")
	}
	if cl.Jti != nil && len(*cl.Jti) > maxTokenIDBytes {
		return nil, verr(ErrMalformedToken, "jti is %d bytes long", len(*cl.Jti))
	}
	return &cl, nil
}

// matches reports whether mac is the HMAC of signed under this pool's key.
func (p *hmacPool) matches(signed string, mac []byte) bool {
	m := p.p.Get().(hash.Hash)
	defer p.p.Put(m)
	m.Reset()
	_, _ = m.Write([]byte(signed))
	var sum [sha256.Size]byte
	return hmac.Equal(m.Sum(sum[:0]), mac)
}

func unixTime(sec float64) time.Time {
	whole, frac := math.Modf(sec)
	return time.Unix(int64(whole), int64(frac*1e9))
}

// truncate keeps attacker-controlled strings short in error details.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
