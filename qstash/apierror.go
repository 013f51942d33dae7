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

// ErrConfiguration is matched by errors that the publisher's configuration
// causes, not the event: QStash refusing the token (401, 403), a
// destination, URL group or queue it does not know or accept (400, 404), a
// BaseURL that is not the QStash API (404, 405), a plan limit (412), and
// events no route sends anywhere. They are transient, so the relay keeps
// the events pending (where the oldest-pending-age alert finds them) while
// an operator fixes the cause, instead of dead-lettering the whole outbox
// within seconds; their text names the cause and the fix.
var ErrConfiguration = errors.New("qstash: the publisher's configuration is refused")

// APIError is an error answered by the QStash API. Inspect it with errors.As:
//
//	var apiErr *qstash.APIError
//	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized { ... }
//
// The publisher wraps it with core.Permanent only when the event itself is
// refused (it is larger than the plan allows), and with core.RetryAfter when
// the server announced when to come back. Errors about the configuration
// match ErrConfiguration.
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
	// Destination is the target of the refused message (Target.String), or
	// "" for a batch request refused as a whole.
	Destination string
	// RetryAfter is the delay the server asked for (429 or 5xx with
	// RateLimit-Reset, Burst-RateLimit-Reset or Retry-After), zero if none.
	RetryAfter time.Duration
}

// Error says the status (or batch position), the destination, QStash's
// message, any retry hint, and — for refusals a person must act on — who
// can fix it and how.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("qstash: ")
	if e.Index >= 0 {
		fmt.Fprintf(&b, "batch message for event #%d refused", e.Index)
	} else {
		fmt.Fprintf(&b, "%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	if e.Destination != "" {
		b.WriteString(" (destination ")
		b.WriteString(e.Destination)
		b.WriteByte(')')
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	if h := e.hint(); h != "" {
		b.WriteString(" — ")
		b.WriteString(h)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrConfiguration) true for refusals caused by the
// configuration, and errors.Is(err, core.ErrMisconfigured) with it, so the
// relay defers those events without counting the attempt.
func (e *APIError) Is(target error) bool {
	return (target == ErrConfiguration || target == core.ErrMisconfigured) && e.cause() == causeConfig
}

// Temporary reports whether retrying may succeed: everything except a
// refusal of the event itself (a message larger than the plan allows). That
// includes the 4xx answers caused by the configuration (see
// ErrConfiguration): treating those as permanent would dead-letter every
// event while an operator fixes a credential or a URL group; as transient
// errors they keep events pending. It mirrors the classification the
// publisher applies.
func (e *APIError) Temporary() bool { return e.cause() != causeEvent }

// cause says who can make a refused request succeed.
type cause int

const (
	causeTransport cause = iota // QStash or the network: 3xx, 408, 429, 5xx
	causeConfig                 // an operator: token, destination, options, plan
	causeEvent                  // nobody: the event itself is refused
)

func (e *APIError) cause() cause {
	if e.Index >= 0 {
		// A batch element is refused for what differs between elements: its
		// destination and its body. Only the body is the event's fault.
		if refusesSize(e.Message) {
			return causeEvent
		}
		return causeConfig
	}
	switch s := e.StatusCode; {
	case s == http.StatusRequestEntityTooLarge:
		return causeEvent
	case s == http.StatusBadRequest && refusesSize(e.Message):
		return causeEvent
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests:
		return causeTransport
	case s >= 400 && s < 500:
		// QStash's 4xx speak of the request's validity, the account, the
		// destination or the options: everything the publisher sends but
		// the payload, which QStash never inspects beyond its size.
		return causeConfig
	}
	return causeTransport
}

// refusesSize reports whether a QStash error text blames the message's
// size, the one property of an event QStash checks. The wording is not
// documented, so it is matched loosely; an unrecognised refusal counts as
// configuration, which retries (bounded by the relay's MaxAttempts) rather
// than dead-lettering on a guess.
func refusesSize(msg string) bool {
	m := strings.ToLower(msg)
	if strings.Contains(m, "too large") || strings.Contains(m, "too big") || strings.Contains(m, "larger than") {
		return true
	}
	return strings.Contains(m, "exceed") && (strings.Contains(m, "size") || strings.Contains(m, "byte") || strings.Contains(m, "mb"))
}

// pendingUntilFixed ends every configuration hint: it tells the operator
// reading the relay's warning that nothing was lost.
const pendingUntilFixed = "the events stay pending, not dead-lettered, until it is fixed"

// hint names the cause and the fix of a refusal a person must act on.
func (e *APIError) hint() string {
	switch e.cause() {
	case causeEvent:
		return "the event itself is refused (larger than the QStash plan allows): it is dead-lettered; shrink the payload or raise the plan's message size, then replay it"
	case causeTransport:
		return ""
	}
	if e.Index >= 0 {
		return "configuration: QStash refused this message's destination or options; check the URL group or URL in PublisherConfig.Destination, Routes or Event.Destination, and the message options; " + pendingUntilFixed
	}
	switch e.StatusCode {
	case http.StatusUnauthorized:
		return "configuration: QStash refused the token; set PublisherConfig.Token to the QSTASH_TOKEN of this QStash region (Upstash console → QStash); " + pendingUntilFixed
	case http.StatusForbidden:
		return "configuration: the token may not publish (a read-only token?); set PublisherConfig.Token to the QSTASH_TOKEN from the Upstash console; " + pendingUntilFixed
	case http.StatusNotFound:
		return "configuration: QStash knows no such URL group or queue, or PublisherConfig.BaseURL is not the QStash API; create the URL group (Upstash console → URL Groups) or fix the name in Destination, Routes or Event.Destination, and check BaseURL; " + pendingUntilFixed
	case http.StatusMethodNotAllowed:
		return "configuration: PublisherConfig.BaseURL does not point at the QStash API (https://qstash.upstash.io, or a qstashdev address); " + pendingUntilFixed
	case http.StatusPreconditionFailed:
		return "configuration: a queue or parallelism limit of the QStash plan is reached; raise it, or lower FlowControl.Parallelism or the number of queues; " + pendingUntilFixed
	case http.StatusBadRequest:
		return "configuration: QStash refused the request as invalid; check the destination (an absolute http(s) URL QStash can reach, or an existing URL group) in PublisherConfig.Destination, Routes or Event.Destination, and the options RetryDelay, Timeout, Delay, Callback, FailureCallback, FlowControl and Label; " + pendingUntilFixed
	}
	return "configuration: QStash refused the request; check PublisherConfig (BaseURL, Token, Destination, Routes and the message options); " + pendingUntilFixed
}

// misconfigured marks an error the publisher's own configuration causes
// before any request (no route for an event, a Route function returning an
// invalid target): transient, matching ErrConfiguration.
type misconfigured struct{ err error }

func (e *misconfigured) Error() string { return e.err.Error() + " — " + pendingUntilFixed }
func (e *misconfigured) Unwrap() error { return e.err }
func (e *misconfigured) Is(target error) bool {
	return target == ErrConfiguration || target == core.ErrMisconfigured
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

// errorFromResponse turns a non-2xx response to a request for dest ("" for a
// batch) into a classified error. It reads
// at most maxErrorBodyBytes of the body; the caller still closes it.
func errorFromResponse(resp *http.Response, dest string, now time.Time) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	e := &APIError{StatusCode: resp.StatusCode, Message: errorMessage(raw), Index: -1, Destination: dest}
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
