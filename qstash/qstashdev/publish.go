package qstashdev

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// publishSpec is a parsed publish, enqueue or batch element: everything but
// the fan-out to URL-group endpoints, which needs the lock.
type publishSpec struct {
	dest       string // URL or URL-group name
	isURL      bool
	queue      string
	method     string
	header     http.Header // forwarded (prefix stripped) plus Content-Type
	body       []byte
	maxRetries int
	retryDelay *delayExpr
	timeout    time.Duration
	delay      time.Duration
	notBefore  time.Time
	callback   string
	failureCB  string
	cbOpts     derivedOpts
	fcbOpts    derivedOpts
	dedupKey   string // "" when not deduplicated
	fcKey      string
	fcPar      int
	fcRate     int
	fcPeriod   time.Duration
	fcSet      bool // Upstash-Flow-Control-Value was given
	label      string
	labels     []string
	redact     redaction
	callerIP   string
	scheduleID string // set when a schedule publishes
	size       int64  // counted against MaxPendingBytes, per message
}

// apiError is a request error answered as {"error": msg}.
type apiError struct {
	status int
	msg    string
	header http.Header // added to the answer (Retry-After)
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

const forwardPrefix = "Upstash-Forward-"

// defaultRetries is QStash's Upstash-Retries default: 4 attempts in all.
const defaultRetries = 3

// maxRetries bounds Upstash-Retries. QStash's bound depends on the plan;
// this one only keeps a typo from scheduling attempts for a century.
const maxRetries = 100

// parseSpec reads the Upstash-* headers of a publish. h must have canonical
// keys.
func parseSpec(h http.Header, body []byte, dest, queue, callerIP string) (*publishSpec, *apiError) {
	sp := &publishSpec{body: body, queue: queue, callerIP: callerIP, maxRetries: defaultRetries}
	var err error
	if sp.dest, sp.isURL, err = parseDestination(dest); err != nil {
		return nil, badRequest("%v", err)
	}
	if aerr := checkLen("destination url", sp.dest, maxURLBytes); aerr != nil {
		return nil, aerr
	}
	if queue != "" && !validName(queue) {
		return nil, badRequest("invalid queue name %q: use letters, digits, '-', '_' and '.'", queue)
	}
	sp.header = forwardedHeaders(h, forwardPrefix)
	if ct := h.Get("Content-Type"); ct != "" {
		sp.header.Set("Content-Type", ct)
	}
	if err := checkHeaders(sp.header); err != nil {
		return nil, badRequest("%v", err)
	}
	if sp.method, err = parseMethod(h.Get("Upstash-Method")); err != nil {
		return nil, badRequest("Upstash-Method: %v", err)
	}
	if v := h.Get("Upstash-Retries"); v != "" {
		if sp.maxRetries, err = parseRetries(v); err != nil {
			return nil, badRequest("Upstash-Retries: %v", err)
		}
	}
	if v := h.Get("Upstash-Retry-Delay"); v != "" {
		if sp.retryDelay, err = parseDelayExpr(v); err != nil {
			return nil, badRequest("Upstash-Retry-Delay: %v", err)
		}
	}
	if v := h.Get("Upstash-Timeout"); v != "" {
		if sp.timeout, err = parseQStashDuration(v); err != nil || sp.timeout <= 0 {
			return nil, badRequest("Upstash-Timeout: want a positive duration such as 30s, got %q", v)
		}
	}
	if v := h.Get("Upstash-Delay"); v != "" {
		if sp.delay, err = parseQStashDuration(v); err != nil {
			return nil, badRequest("Upstash-Delay: %v", err)
		}
	}
	if v := h.Get("Upstash-Not-Before"); v != "" {
		secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || secs < 0 {
			return nil, badRequest("Upstash-Not-Before: want unix seconds, got %q", v)
		}
		sp.notBefore = time.Unix(secs, 0)
	}
	if v := h.Get("Upstash-Callback"); v != "" {
		if aerr := checkLen("Upstash-Callback", v, maxURLBytes); aerr != nil {
			return nil, aerr
		}
		if _, err := parseDestinationURL(v); err != nil {
			return nil, badRequest("Upstash-Callback: %v", err)
		}
		sp.callback = v
		if sp.cbOpts, err = parseDerived(h, "Upstash-Callback-"); err != nil {
			return nil, badRequest("%v", err)
		}
	}
	if v := h.Get("Upstash-Failure-Callback"); v != "" {
		if aerr := checkLen("Upstash-Failure-Callback", v, maxURLBytes); aerr != nil {
			return nil, aerr
		}
		if _, err := parseDestinationURL(v); err != nil {
			return nil, badRequest("Upstash-Failure-Callback: %v", err)
		}
		sp.failureCB = v
		if sp.fcbOpts, err = parseDerived(h, "Upstash-Failure-Callback-"); err != nil {
			return nil, badRequest("%v", err)
		}
	}
	if v := h.Get("Upstash-Flow-Control-Key"); v != "" {
		if aerr := checkLen("Upstash-Flow-Control-Key", v, maxOptionBytes); aerr != nil {
			return nil, aerr
		}
		sp.fcKey = v
		sp.fcPeriod = time.Second
		if fv := h.Get("Upstash-Flow-Control-Value"); fv != "" {
			if sp.fcPar, sp.fcRate, sp.fcPeriod, err = parseFlowControlValue(fv); err != nil {
				return nil, badRequest("%v", err)
			}
			sp.fcSet = true
		}
	}
	sp.label = h.Get("Upstash-Label")
	if aerr := checkLen("Upstash-Label", sp.label, maxOptionBytes); aerr != nil {
		return nil, aerr
	}
	sp.labels = parseLabels(sp.label)
	if v := h.Get("Upstash-Redact-Fields"); v != "" {
		if sp.redact, err = parseRedaction(v); err != nil {
			return nil, badRequest("Upstash-Redact-Fields: %v", err)
		}
	}
	if id := h.Get("Upstash-Deduplication-Id"); id != "" {
		if aerr := checkLen("Upstash-Deduplication-Id", id, maxOptionBytes); aerr != nil {
			return nil, aerr
		}
		sp.dedupKey = sp.dest + "\x00id\x00" + id
	} else if strings.EqualFold(h.Get("Upstash-Content-Based-Deduplication"), "true") {
		sp.dedupKey = sp.dest + "\x00content\x00" + contentHash(sp)
	}
	var expr string
	if sp.retryDelay != nil {
		expr = sp.retryDelay.src
	}
	sp.size = messageSize(sp.body, sp.header, sp.label, sp.callback, sp.failureCB, sp.fcKey, expr) +
		headerBytes(sp.cbOpts.header) + headerBytes(sp.fcbOpts.header)
	return sp, nil
}

// forwardedHeaders returns the headers named prefix+X as X.
func forwardedHeaders(h http.Header, prefix string) http.Header {
	out := make(http.Header)
	for k, v := range h {
		if len(k) > len(prefix) && strings.HasPrefix(k, prefix) {
			out[k[len(prefix):]] = v
		}
	}
	return out
}

// checkHeaders refuses header names and values that cannot be sent as they
// are: a forwarded header must not smuggle a line break into the delivery.
func checkHeaders(h http.Header) error {
	for k, vs := range h {
		for i := 0; i < len(k); i++ {
			if !isTokenChar(k[i]) {
				return fmt.Errorf("forwarded header name %q is not a valid HTTP header name", k)
			}
		}
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
					return fmt.Errorf("forwarded header %s: value holds a control character", k)
				}
			}
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseDerived reads the options of callback messages:
// <prefix>Forward-*, <prefix>Retries, <prefix>Method, <prefix>Timeout.
func parseDerived(h http.Header, prefix string) (derivedOpts, error) {
	o := derivedOpts{header: forwardedHeaders(h, prefix+"Forward-"), maxRetries: defaultRetries}
	if err := checkHeaders(o.header); err != nil {
		return o, err
	}
	var err error
	if v := h.Get(prefix + "Retries"); v != "" {
		if o.maxRetries, err = parseRetries(v); err != nil {
			return o, fmt.Errorf("%sRetries: %v", prefix, err)
		}
	}
	if v := h.Get(prefix + "Method"); v != "" {
		if o.method, err = parseMethod(v); err != nil {
			return o, fmt.Errorf("%sMethod: %v", prefix, err)
		}
	}
	if v := h.Get(prefix + "Timeout"); v != "" {
		if o.timeout, err = parseQStashDuration(v); err != nil || o.timeout <= 0 {
			return o, fmt.Errorf("%sTimeout: want a positive duration such as 30s, got %q", prefix, v)
		}
	}
	return o, nil
}

func parseRetries(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > maxRetries {
		return 0, fmt.Errorf("want an integer from 0 to %d, got %q", maxRetries, v)
	}
	return n, nil
}

func parseMethod(v string) (string, error) {
	if v == "" {
		return http.MethodPost, nil
	}
	v = strings.ToUpper(strings.TrimSpace(v))
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 'A' || c > 'Z' {
			return "", fmt.Errorf("%q is not an HTTP method", v)
		}
	}
	return v, nil
}

// contentHash identifies a message by what it delivers: destination, body,
// Content-Type and forwarded headers.
func contentHash(sp *publishSpec) string {
	h := sha256.New()
	h.Write([]byte(sp.dest))
	h.Write([]byte{0})
	h.Write(sp.body)
	keys := make([]string, 0, len(sp.header))
	for k := range sp.header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Write([]byte{0})
		h.Write([]byte(k))
		for _, v := range sp.header[k] {
			h.Write([]byte{1})
			h.Write([]byte(v))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// parseDestination tells a URL from a URL-group name: anything with a
// scheme is a URL, a plain name is a group.
func parseDestination(d string) (dest string, isURL bool, err error) {
	switch {
	case d == "":
		return "", false, errors.New("missing destination: publish to /v2/publish/<url or url group>")
	case strings.HasPrefix(d, "api/"):
		return "", false, fmt.Errorf("destination %q: API destinations (LLM providers) are not supported by qstashdev", d)
	case strings.Contains(d, "://"):
		if _, err := parseDestinationURL(d); err != nil {
			return "", false, err
		}
		return d, true, nil
	case validName(d):
		return d, false, nil
	default:
		return "", false, fmt.Errorf("invalid destination %q: use an absolute http(s) URL or a URL group name", d)
	}
}

// parseDestinationURL checks an absolute http(s) URL.
func parseDestinationURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("invalid destination url %q: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid destination url %q: use an absolute http or https URL", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid destination url %q: missing host", s)
	}
	return u, nil
}

// publishResult is one element of a publish answer.
type publishResult struct {
	MessageID    string `json:"messageId,omitempty"`
	URL          string `json:"url,omitempty"`
	Deduplicated bool   `json:"deduplicated,omitempty"`
	Error        string `json:"error,omitempty"`
}

// submitLocked creates the messages of one publish: one for a URL, one per
// endpoint for a URL group. deduped reports a duplicate within the window;
// its results are the earlier ones.
func (s *Server) submitLocked(sp *publishSpec, now time.Time) (res []publishResult, deduped bool, aerr *apiError) {
	if sp.dedupKey != "" {
		if e := s.dedup.get(sp.dedupKey, now); e != nil {
			res = make([]publishResult, len(e.results))
			for i, r := range e.results {
				r.Deduplicated = true
				res[i] = r
			}
			return res, true, nil
		}
	}
	var targets []Endpoint
	if sp.isURL {
		targets = []Endpoint{{URL: sp.dest}}
	} else {
		g := s.groups[sp.dest]
		if g == nil {
			return nil, false, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("url group %q not found: create it with POST /v2/topics/%s/endpoints, or publish to an absolute http(s) URL", sp.dest, sp.dest)}
		}
		targets = g.endpoints
	}
	if aerr := s.reservePendingLocked(len(targets), targetsBytes(sp, targets)); aerr != nil {
		return nil, false, aerr
	}
	var q *queue
	if sp.queue != "" {
		if aerr := s.newQueueAllowedLocked(sp.queue, 0); aerr != nil {
			return nil, false, aerr
		}
		q = s.queueLocked(sp.queue, now)
	}
	if sp.fcSet {
		s.updateFlowLocked(&message{fcKey: sp.fcKey, fcPar: sp.fcPar, fcRate: sp.fcRate, fcPeriod: sp.fcPeriod}, now)
	}
	notBefore := sp.notBefore
	if notBefore.IsZero() && sp.delay > 0 {
		notBefore = now.Add(sp.delay)
	}
	res = make([]publishResult, 0, len(targets))
	for _, t := range targets {
		m := &message{
			id: s.ids.messageID(), url: t.URL, endpointName: t.Name, queue: q, queueName: sp.queue,
			method: sp.method, header: sp.header, body: sp.body, maxRetries: sp.maxRetries,
			retryDelay: sp.retryDelay, timeout: sp.timeout, notBefore: notBefore, createdAt: now,
			callerIP: sp.callerIP, label: sp.label, labels: sp.labels, redact: sp.redact,
			scheduleID: sp.scheduleID, callback: sp.callback, failureCallback: sp.failureCB,
			callbackOpts: sp.cbOpts, failureOpts: sp.fcbOpts, size: sp.size + int64(len(t.URL)),
			fcKey: sp.fcKey, fcPar: sp.fcPar, fcRate: sp.fcRate, fcPeriod: sp.fcPeriod,
		}
		if !sp.isURL {
			m.group = sp.dest
		}
		s.createLocked(m, now)
		r := publishResult{MessageID: m.id}
		if !sp.isURL {
			r.URL = t.URL
		}
		res = append(res, r)
	}
	if sp.dedupKey != "" {
		s.dedup.put(sp.dedupKey, res, now, s.cfg.DeduplicationWindow)
	}
	return res, false, nil
}

// handlePublish serves POST /v2/publish/{destination} and POST
// /v2/enqueue/{queue}/{destination}.
func (s *Server) handlePublish(w http.ResponseWriter, r *http.Request, dest, queue string) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	body, ok := s.readBody(w, r, s.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	sp, aerr := parseSpec(r.Header, body, dest, queue, callerIP(r))
	if aerr != nil {
		writeError(w, aerr.status, aerr.msg)
		return
	}
	s.mu.Lock()
	res, deduped, aerr := s.submitLocked(sp, s.clock.Now())
	s.mu.Unlock()
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	status := http.StatusOK
	if deduped {
		status = http.StatusAccepted
	}
	if sp.isURL {
		writeJSON(w, status, res[0])
		return
	}
	writeJSON(w, status, res)
}

// batchItem is one element of POST /v2/batch. "queue":"" means none (the Go
// SDK always sends the field).
type batchItem struct {
	Destination string       `json:"destination"`
	Headers     batchHeaders `json:"headers"`
	Body        string       `json:"body"`
	Queue       string       `json:"queue"`
}

// batchHeaders accepts header values as strings (the SDKs) or arrays.
type batchHeaders http.Header

func (b *batchHeaders) UnmarshalJSON(data []byte) error {
	// Fast path: every SDK sends plain strings, and decoding straight into
	// a map[string]string is several times cheaper than RawMessage per value.
	var flat map[string]string
	if err := json.Unmarshal(data, &flat); err == nil {
		h := make(http.Header, len(flat))
		for k, v := range flat {
			ck := textproto.CanonicalMIMEHeaderKey(k)
			h[ck] = append(h[ck], v)
		}
		*b = batchHeaders(h)
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	h := make(http.Header, len(raw))
	for k, v := range raw {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		var str string
		if err := json.Unmarshal(v, &str); err == nil {
			h[ck] = append(h[ck], str)
			continue
		}
		var strs []string
		if err := json.Unmarshal(v, &strs); err != nil {
			return fmt.Errorf("header %q: want a string or an array of strings", k)
		}
		h[ck] = append(h[ck], strs...)
	}
	*b = batchHeaders(h)
	return nil
}

// maxBatchFactor bounds a batch request at this many maximal messages.
const maxBatchFactor = 100

// handleBatch serves POST /v2/batch. The answer is aligned with the input:
// an object per URL destination, an array per URL group, and {"error"} for
// an element that was refused while the others still went.
func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	body, ok := s.readBody(w, r, s.cfg.MaxBodyBytes*maxBatchFactor)
	if !ok {
		return
	}
	items, err := parseBatchFast(body)
	if err != nil {
		items, err = nil, json.Unmarshal(body, &items)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid batch: want a JSON array of {destination, headers, body, queue}: "+err.Error())
		return
	}
	ip := callerIP(r)
	specs := make([]*publishSpec, len(items))
	errs := make([]string, len(items))
	for i, it := range items {
		if int64(len(it.Body)) > s.cfg.MaxBodyBytes {
			errs[i] = fmt.Sprintf("message body is larger than %d bytes", s.cfg.MaxBodyBytes)
			continue
		}
		sp, aerr := parseSpec(http.Header(it.Headers), []byte(it.Body), it.Destination, it.Queue, ip)
		if aerr != nil {
			errs[i] = aerr.msg
			continue
		}
		specs[i] = sp
	}
	out := make([]any, len(items))
	s.mu.Lock()
	now := s.clock.Now()
	if aerr := s.reserveBatchLocked(specs, now); aerr != nil {
		s.mu.Unlock()
		writeAPIError(w, aerr)
		return
	}
	for i, sp := range specs {
		if sp == nil {
			continue
		}
		res, _, aerr := s.submitLocked(sp, now)
		switch {
		case aerr != nil:
			errs[i] = aerr.msg
		case sp.isURL:
			out[i] = res[0]
		default:
			out[i] = res
		}
	}
	s.mu.Unlock()
	for i, e := range errs {
		if e != "" {
			out[i] = publishResult{Error: e}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// callerIP is the publisher's address, delivered as Upstash-Caller-Ip.
func callerIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// dedupIndex remembers deduplication keys for the window, expiring them in
// insertion order (every entry has the same lifetime, so a FIFO suffices).
type dedupIndex struct {
	entries map[string]*dedupEntry
	order   deque[*dedupEntry]
	max     int
}

type dedupEntry struct {
	key     string
	expires time.Time
	results []publishResult
}

func (d *dedupIndex) expire(now time.Time) {
	for d.order.len() > 0 && !now.Before(d.order.front().expires) {
		e := d.order.pop()
		if d.entries[e.key] == e {
			delete(d.entries, e.key)
		}
	}
}

func (d *dedupIndex) get(key string, now time.Time) *dedupEntry {
	d.expire(now)
	return d.entries[key]
}

func (d *dedupIndex) put(key string, res []publishResult, now time.Time, window time.Duration) {
	d.expire(now)
	for d.order.len() >= d.max {
		e := d.order.pop()
		if d.entries[e.key] == e {
			delete(d.entries, e.key)
		}
	}
	e := &dedupEntry{key: key, expires: now.Add(window), results: res}
	d.entries[key] = e
	d.order.push(e)
}
