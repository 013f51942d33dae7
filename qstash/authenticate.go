package qstash

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// authenticator is what every endpoint QStash calls checks before it acts:
// a POST, a body within bounds, a strictly verified signature (with the
// keys of the delivery's region) and a token not seen before. The
// Receiver and the DrainHandler share it, so the rules cannot drift apart.
type authenticator struct {
	verifier *Verifier
	url      string
	maxBody  int64
	guard    ReplayGuard
}

// refusal is why authenticate refused a request: the outcome, the status
// to answer and the error for the logs.
type refusal struct {
	outcome Outcome
	status  int
	err     error
}

// authenticate reads and checks r. On success it returns the body and the
// token's claims; otherwise the refusal, having set any header the answer
// needs (Allow, Retry-After) on w.
func (a *authenticator) authenticate(ctx context.Context, w http.ResponseWriter, r *http.Request) ([]byte, Claims, *refusal) {
	refuse := func(o Outcome, status int, err error) ([]byte, Claims, *refusal) {
		return nil, Claims{}, &refusal{outcome: o, status: status, err: err}
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return refuse(OutcomeMalformed, http.StatusMethodNotAllowed, fmt.Errorf("qstash: method %s: QStash deliveries are POSTs", r.Method))
	}
	if r.ContentLength > a.maxBody {
		return refuse(OutcomeTooLarge, http.StatusRequestEntityTooLarge, fmt.Errorf("qstash: body of %d bytes exceeds MaxBodyBytes (%d)", r.ContentLength, a.maxBody))
	}
	// MaxBytesReader reads at most maxBody+1 bytes and makes the server
	// close the connection instead of draining an oversized body.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return refuse(OutcomeTooLarge, http.StatusRequestEntityTooLarge, fmt.Errorf("qstash: body exceeds MaxBodyBytes (%d)", a.maxBody))
		}
		return refuse(OutcomeMalformed, http.StatusBadRequest, fmt.Errorf("qstash: read body: %w", err))
	}

	sigs := r.Header.Values("Upstash-Signature")
	if len(sigs) > 1 {
		return refuse(OutcomeUnauthorized, http.StatusUnauthorized, verr(ErrMalformedToken, "%d Upstash-Signature headers", len(sigs)))
	}
	var token string
	if len(sigs) == 1 {
		token = sigs[0]
	}
	claims, err := a.verifier.VerifyRegionToken(token, body, a.url, r.Header.Get("Upstash-Region"))
	if err != nil {
		return refuse(OutcomeUnauthorized, http.StatusUnauthorized, err)
	}
	// Recorded before anything runs: a replay arriving while the first
	// delivery is still being handled is refused too.
	if claims.ID == "" {
		return refuse(OutcomeUnauthorized, http.StatusUnauthorized, verr(ErrMissingTokenID, "QStash always sets jti; a token without one could be replayed unnoticed"))
	}
	first, err := a.guard.FirstUse(ctx, claims.ID, claims.Expires.Add(a.verifier.leeway))
	if err != nil {
		status := http.StatusInternalServerError
		if after, ok := core.RetryAfterHint(err); ok && after > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(int64((after+time.Second-1)/time.Second), 10))
			status = http.StatusServiceUnavailable
		}
		return refuse(OutcomeTransient, status, fmt.Errorf("qstash: replay guard: %w", err))
	}
	if !first {
		return refuse(OutcomeUnauthorized, http.StatusUnauthorized, verr(ErrTokenReplayed, "jti %q was accepted before: QStash signs every attempt anew, so this is a captured delivery sent again", truncate(claims.ID)))
	}
	return body, claims, nil
}
