package qstash

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// Limits on how much of a QStash response is read. Bodies are always drained
// up to a bound and closed, so the connection goes back to the pool and a
// misbehaving server cannot make the publisher buffer without limit.
const (
	maxErrorBodyBytes = 64 << 10
	maxDrainBytes     = 64 << 10
)

// ErrUnexpectedResponse is matched by errors about a 2xx response whose body
// the publisher cannot make sense of (not the JSON shape QStash documents, or
// a batch answer not aligned with the request). They are transient: the
// events carry deduplication IDs, so publishing them again is harmless.
var ErrUnexpectedResponse = errors.New("qstash: unexpected response")

// APIError is an error answered by the QStash API. Inspect it with errors.As:
//
//	var apiErr *qstash.APIError
//	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized { ... }
//
// The publisher wraps it with core.Permanent for 4xx answers other than 429,
// and with core.RetryAfter when the server announced when to come back.
type APIError struct {
	// StatusCode is the HTTP status of the response that carried the error.
	// For an error element of a batch answer it is the batch's own (2xx)
	// status and Index is set.
	StatusCode int
	// Message is the "error" field of QStash's JSON answer, or a bounded
	// excerpt of the body when it is not JSON, so the status is never lost.
	Message string
	// Index is, for a message that a batch answer refused while accepting
	// the others, the position of its event among those passed to Publish;
	// -1 for an error that concerns the whole request.
	Index int
	// RetryAfter is the delay the server asked for (429 or 5xx with
	// RateLimit-Reset, Burst-RateLimit-Reset or Retry-After), zero if none.
	RetryAfter time.Duration
}

// Error says the status (or batch position), QStash's message and any retry
// hint.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("qstash: ")
	if e.Index >= 0 {
		fmt.Fprintf(&b, "batch message for event #%d refused", e.Index)
	} else {
		fmt.Fprintf(&b, "%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Temporary reports whether retrying may succeed: 429, 5xx and other
// non-4xx statuses, and the 4xx that speak of the account rather than the
// message — 401/403 (a wrong or revoked token) and 412 (a queue or
// parallelism limit). Treating those as permanent would dead-letter every
// event while an operator fixes a credential; as transient errors they keep
// events pending, where the oldest-pending-age alert finds them. It mirrors
// the classification the publisher applies.
func (e *APIError) Temporary() bool {
	if e.Index >= 0 {
		return false
	}
	switch e.StatusCode {
	case http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden, http.StatusPreconditionFailed:
		return true
	}
	return e.StatusCode < 400 || e.StatusCode >= 500
}

// classify wraps an *APIError the way core expects: permanent when retrying
// cannot help, with a retry hint when the server gave one.
func classify(e *APIError) error {
	if !e.Temporary() {
		return core.Permanent(e)
	}
	if e.RetryAfter > 0 {
		return core.RetryAfter(e, e.RetryAfter)
	}
	return e
}

// drainClose discards what is left of a body (bounded) and closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrainBytes))
	_ = body.Close()
}

// errorFromResponse turns a non-2xx response into a classified error. It reads
// at most maxErrorBodyBytes of the body; the caller still closes it.
func errorFromResponse(resp *http.Response, now time.Time) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	e := &APIError{StatusCode: resp.StatusCode, Message: errorMessage(raw), Index: -1}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		e.RetryAfter = retryAfter(resp.Header, now)
	}
	return classify(e)
}

// errorMessage extracts QStash's {"error": "..."} or falls back to the body
// text, trimmed, so a proxy's HTML error page still says something.
func errorMessage(raw []byte) string {
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		return body.Error
	}
	s := strings.TrimSpace(string(raw))
	const max = 512
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// retryAfter returns how long to wait according to the rate-limit headers.
//
// QStash announces the daily quota in RateLimit-* and burst limits in
// Burst-RateLimit-*, each Reset being a unix time in seconds. When a
// Remaining header says which limit is exhausted only that one counts; the
// longest applicable wait wins, since waiting less would hit the limit again.
// A standard Retry-After (seconds or HTTP date) is honoured too. Reset values
// that cannot be unix seconds are read defensively: small ones as a delta in
// seconds, huge ones as unix milliseconds.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var wait time.Duration
	for _, prefix := range [...]string{"Burst-RateLimit-", "RateLimit-"} {
		reset := h.Get(prefix + "Reset")
		if reset == "" {
			continue
		}
		if rem := h.Get(prefix + "Remaining"); rem != "" && rem != "0" {
			continue // this limit is not the one exhausted
		}
		sec, err := strconv.ParseFloat(reset, 64)
		if err != nil || sec <= 0 {
			continue
		}
		switch {
		case sec < 1e9: // a delta in seconds, as the IETF RateLimit drafts use
			wait = max(wait, time.Duration(sec*float64(time.Second)))
		case sec > 1e11: // milliseconds, as some proxies send
			wait = max(wait, time.UnixMilli(int64(sec)).Sub(now))
		default:
			wait = max(wait, time.UnixMilli(int64(sec*1000)).Sub(now))
		}
	}
	if ra := h.Get("Retry-After"); ra != "" {
		if sec, err := strconv.Atoi(ra); err == nil && sec > 0 {
			wait = max(wait, time.Duration(sec)*time.Second)
		} else if at, err := http.ParseTime(ra); err == nil {
			wait = max(wait, at.Sub(now))
		}
	}
	// QStash ignores retry hints over a day for its own deliveries; a longer
	// one here is more likely a misread header than a real quota.
	return min(max(wait, 0), maxRetryHint)
}

// maxRetryHint caps the wait announced by rate-limit headers.
const maxRetryHint = 24 * time.Hour
