package qstashdev

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// attemptResult is what one delivery attempt observed.
type attemptResult struct {
	status  int
	header  http.Header
	body    []byte
	err     error // no response: connection error or timeout
	aborted bool  // the server is stopping; the attempt does not count
}

func (r *attemptResult) ok() bool { return r.err == nil && r.status >= 200 && r.status < 300 }

// nonRetryable reports QStash's "fail now" answer: 489 with
// Upstash-NonRetryable-Error: true. A bare 489 is an ordinary failure.
func (r *attemptResult) nonRetryable() bool {
	return r.err == nil && r.status == 489 && strings.EqualFold(r.header.Get("Upstash-NonRetryable-Error"), "true")
}

func (r *attemptResult) errorText() string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("endpoint answered %d %s", r.status, http.StatusText(r.status))
}

// attempt makes one HTTP request to m's destination. It runs without the
// lock and reads only m's fixed fields (and m.u, which only the worker
// holding the message touches).
func (s *Server) attempt(parent context.Context, m *message, retried int) attemptResult {
	timeout := m.timeout
	if timeout == 0 {
		timeout = s.cfg.Timeout
	}
	if m.u == nil {
		// Publishing validated the URL, so this is not expected.
		return attemptResult{err: fmt.Errorf("destination %q is not a valid URL", m.url)}
	}
	// QStash's own headers; they override forwarded ones of the same name.
	fixed := make([]string, 0, 18)
	fixed = append(fixed,
		"User-Agent", "Upstash-QStash",
		"Upstash-Signature", s.signer.Load().sign(m.url, m.body, s.clock.Now()),
		"Upstash-Message-Id", m.id,
		"Upstash-Retried", strconv.Itoa(retried),
	)
	if m.callerIP != "" {
		fixed = append(fixed, "Upstash-Caller-Ip", m.callerIP)
	}
	if m.group != "" {
		fixed = append(fixed, "Upstash-Topic-Name", m.group)
	}
	if m.scheduleID != "" {
		fixed = append(fixed, "Upstash-Schedule-Id", m.scheduleID)
	}
	if s.region != "" {
		fixed = append(fixed, "Upstash-Region", s.region)
	}
	wantBody := func(status int) bool { return m.callback != "" || status < 200 || status > 299 }

	var (
		res attemptResult
		err error
	)
	if s.lan != nil && s.lan.handles(m.u) {
		res, err = s.lan.do(parent, &lanRequest{u: m.u, method: m.method, fixed: fixed, header: m.header,
			body: m.body, wantBody: wantBody, maxBody: s.cfg.MaxResponseBytes}, timeout)
	} else {
		res, err = s.attemptStd(parent, m, fixed, timeout, wantBody)
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return attemptResult{aborted: true}
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("timeout: no response within %s", timeout)
		}
		return attemptResult{err: err}
	}
	return res
}

// attemptStd sends through net/http: https, proxies, or Config.Client.
func (s *Server) attemptStd(parent context.Context, m *message, fixed []string, timeout time.Duration, wantBody func(int) bool) (attemptResult, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, m.method, m.url, bytes.NewReader(m.body))
	if err != nil {
		return attemptResult{}, fmt.Errorf("build request: %w", err)
	}
	h := make(http.Header, len(m.header)+len(fixed)/2)
	for k, v := range m.header {
		h[k] = v
	}
	for i := 0; i+1 < len(fixed); i += 2 {
		h[fixed[i]] = []string{fixed[i+1]}
	}
	// net/http retries a POST on a fresh connection, when a reused one
	// was closed before answering, only if the request is marked
	// idempotent; a nil value marks it without sending the header. Its
	// read loop already drops idle connections as their peers close them,
	// so only that race is left. Why a retry is safe: see errStaleConn.
	if _, ok := h["Idempotency-Key"]; !ok {
		if _, ok := h["X-Idempotency-Key"]; !ok {
			h["X-Idempotency-Key"] = nil
		}
	}
	req.Header = h
	resp, err := s.client.Do(req)
	if err != nil {
		return attemptResult{}, err
	}
	defer resp.Body.Close()
	res := attemptResult{status: resp.StatusCode, header: resp.Header}
	if wantBody(resp.StatusCode) {
		if res.body, err = io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes)); err != nil {
			return attemptResult{}, err
		}
	}
	// Drain (boundedly) so the connection goes back to the pool.
	_, _ = io.CopyN(io.Discard, resp.Body, 1<<20)
	return res, nil
}

// outcome holds what an attempt's completion creates, prepared before the
// lock is taken so the locked section stays short.
type outcome struct {
	callback *message // reports this attempt to Upstash-Callback
	failure  *message // reports the final failure to Upstash-Failure-Callback
	dlqID    string
	delay    time.Duration // before the next attempt, if there is one
}

func (s *Server) prepareOutcome(m *message, retried int, res *attemptResult) outcome {
	var out outcome
	if res.aborted {
		return out
	}
	now := s.clock.Now()
	// Callbacks report responses; an attempt that got none (connection
	// error, timeout) has nothing to report. Callback messages get no
	// callbacks of their own.
	if m.callback != "" && m.kind == kindNormal && res.err == nil {
		out.callback = s.newCallbackMessage(m, m.callback, m.callbackOpts, kindCallback, retried, res, "", now)
	}
	if res.ok() {
		return out
	}
	final := res.nonRetryable() || retried >= m.maxRetries
	if final {
		out.dlqID = dlqID(now, s.dlqSeqNext())
		if m.failureCallback != "" && m.kind == kindNormal {
			out.failure = s.newCallbackMessage(m, m.failureCallback, m.failureOpts, kindFailureCallback, retried, res, out.dlqID, now)
		}
		return out
	}
	out.delay = s.retryDelay(m, retried+1, res, now)
	return out
}

// retryDelay is the wait before retry n (n >= 1): the response's
// Retry-After hint, else the message's Upstash-Retry-Delay expression with
// retried = n-1, else Config.Backoff(n); then scaled by BackoffScale.
func (s *Server) retryDelay(m *message, n int, res *attemptResult, now time.Time) time.Duration {
	var d time.Duration
	if hint, ok := retryAfterHint(res.header, now); ok {
		d = hint
	} else if m.retryDelay != nil {
		ms := math.Min(m.retryDelay.millis(n-1), float64(maxRetryAfter/time.Millisecond))
		d = time.Duration(ms * float64(time.Millisecond))
	} else {
		d = s.cfg.Backoff(n)
	}
	if s.cfg.BackoffScale != 1 {
		d = time.Duration(float64(d) * s.cfg.BackoffScale)
	}
	return d
}

// completeLocked settles an attempt: delivered, retried later, failed into
// the DLQ, or cancelled.
func (s *Server) completeLocked(m *message, retried int, res *attemptResult, out *outcome) {
	if res.aborted {
		return // the server is stopping; nothing is settled
	}
	now := s.clock.Now()
	s.releaseFlowLocked(m, now)
	// Callback messages are created before the source can finish, so
	// WaitIdle never sees a gap between the two.
	if out.callback != nil {
		s.createLocked(out.callback, now)
	}
	if res.ok() {
		s.recordLocked(m, StateDelivered, now, "", time.Time{}, res.status)
		s.finishLocked(m, now)
		return
	}
	m.retried = retried + 1
	s.recordLocked(m, StateError, now, res.errorText(), time.Time{}, res.status)
	switch {
	case m.cancelRequested:
		s.recordLocked(m, StateCancelled, now, "", time.Time{}, 0)
		s.finishLocked(m, now)
	case out.dlqID != "":
		s.recordLocked(m, StateFailed, now, res.errorText(), time.Time{}, res.status)
		s.dlq.add(&dlqEntry{id: out.dlqID, msg: m, retried: retried, failedAt: now,
			status: res.status, header: res.header, body: res.body, errText: res.errorText()})
		if out.failure != nil {
			s.createLocked(out.failure, now)
		}
		s.finishLocked(m, now)
	default:
		at := now.Add(out.delay)
		s.recordLocked(m, StateRetry, now, "", at, 0)
		s.scheduleLocked(m, at, now)
	}
}

// callbackBody is the JSON QStash posts to Upstash-Callback and
// Upstash-Failure-Callback. Bodies are standard base64; notBefore and
// createdAt are unix milliseconds as strings, as in QStash's documentation.
type callbackBody struct {
	Status          int         `json:"status"`
	Header          http.Header `json:"header"`
	Body            string      `json:"body"`
	Retried         int         `json:"retried"`
	MaxRetries      int         `json:"maxRetries"`
	DlqID           string      `json:"dlqId,omitempty"`
	SourceMessageID string      `json:"sourceMessageId"`
	TopicName       string      `json:"topicName,omitempty"`
	EndpointName    string      `json:"endpointName,omitempty"`
	URL             string      `json:"url"`
	Method          string      `json:"method"`
	SourceHeader    http.Header `json:"sourceHeader"`
	SourceBody      string      `json:"sourceBody"`
	NotBefore       string      `json:"notBefore"`
	CreatedAt       string      `json:"createdAt"`
	CallerIP        string      `json:"callerIP,omitempty"`
	Label           string      `json:"label,omitempty"`
	ScheduleID      string      `json:"scheduleId,omitempty"`
	Error           string      `json:"error,omitempty"`
}

func (s *Server) newCallbackMessage(src *message, url string, opts derivedOpts, kind msgKind, retried int, res *attemptResult, dlqID string, now time.Time) *message {
	notBefore := src.notBefore
	if notBefore.IsZero() {
		notBefore = src.createdAt
	}
	cb := callbackBody{
		Status:          res.status,
		Header:          res.header,
		Body:            base64.StdEncoding.EncodeToString(res.body),
		Retried:         retried,
		MaxRetries:      src.maxRetries,
		DlqID:           dlqID,
		SourceMessageID: src.id,
		TopicName:       src.group,
		EndpointName:    src.endpointName,
		URL:             src.url,
		Method:          src.method,
		SourceHeader:    src.header,
		SourceBody:      base64.StdEncoding.EncodeToString(src.body),
		NotBefore:       strconv.FormatInt(notBefore.UnixMilli(), 10),
		CreatedAt:       strconv.FormatInt(src.createdAt.UnixMilli(), 10),
		CallerIP:        src.callerIP,
		Label:           firstLabel(src.labels),
		ScheduleID:      src.scheduleID,
	}
	if res.err != nil {
		cb.Error = res.err.Error()
	}
	if cb.Header == nil {
		cb.Header = http.Header{}
	}
	body, err := json.Marshal(cb)
	if err != nil { // only plain strings and ints: cannot happen
		panic(fmt.Sprintf("qstashdev: marshal callback body: %v", err))
	}
	h := make(http.Header, len(opts.header)+1)
	for k, v := range opts.header {
		h[k] = v
	}
	h.Set("Content-Type", "application/json")
	method := opts.method
	if method == "" {
		method = http.MethodPost
	}
	return &message{
		id:          s.ids.messageID(),
		url:         url,
		method:      method,
		header:      h,
		body:        body,
		size:        messageSize(body, h, url, src.label),
		maxRetries:  opts.maxRetries,
		timeout:     opts.timeout,
		createdAt:   now,
		callerIP:    src.callerIP,
		label:       src.label,
		labels:      src.labels,
		scheduleID:  src.scheduleID,
		redact:      src.redact,
		kind:        kind,
		sourceMsgID: src.id,
	}
}
