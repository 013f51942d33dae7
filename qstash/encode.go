package qstash

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outboxkit/core"
)

// Request header names QStash reads. Forwarded headers are named
// forwardPrefix + name and reach the consumer as name.
const (
	forwardPrefix       = "Upstash-Forward-"
	hdrDeduplicationID  = "Upstash-Deduplication-Id"
	hdrRetries          = "Upstash-Retries"
	hdrRetryDelay       = "Upstash-Retry-Delay"
	hdrTimeout          = "Upstash-Timeout"
	hdrDelay            = "Upstash-Delay"
	hdrNotBefore        = "Upstash-Not-Before"
	hdrCallback         = "Upstash-Callback"
	hdrFailureCallback  = "Upstash-Failure-Callback"
	hdrFlowControlKey   = "Upstash-Flow-Control-Key"
	hdrFlowControlValue = "Upstash-Flow-Control-Value"
	hdrLabel            = "Upstash-Label"
	hdrContentType      = "Content-Type"
	contentTypeJSON     = "application/json"
)

// headerSink receives a message's headers. The name is split in two so the
// batch encoder can write Upstash-Forward-<name> without concatenating.
type headerSink interface {
	add(prefix, name, value string)
}

// httpHeaderSink fills the headers of a single-publish request.
type httpHeaderSink http.Header

func (s httpHeaderSink) add(prefix, name, value string) {
	// Assigned directly, not with Set, so names keep the case they are sent
	// with (Upstash-Forward-ce-id); HTTP does not care, logs read better.
	s[prefix+name] = []string{value}
}

// jsonHeaderSink writes the members of a batch element's "headers" object.
type jsonHeaderSink struct {
	b     []byte
	first bool
}

func (s *jsonHeaderSink) add(prefix, name, value string) {
	if !s.first {
		s.b = append(s.b, ',')
	}
	s.first = false
	s.b = append(s.b, '"')
	s.b = appendJSONEscaped(s.b, prefix)
	s.b = appendJSONEscaped(s.b, name)
	s.b = append(s.b, '"', ':', '"')
	s.b = appendJSONEscaped(s.b, value)
	s.b = append(s.b, '"')
}

// messageHeaders emits the headers of the message for e: its Content-Type,
// the deduplication ID, the configured Upstash-* options and, in binary
// mode, the CloudEvents attributes forwarded to the consumer (in structured
// mode they are in the body, signed, and none is forwarded: a copy in
// unsigned headers would only invite trusting it). It returns a permanent
// error, and emits nothing, for an event whose headers cannot travel over
// HTTP.
func (p *Publisher) messageHeaders(sink headerSink, e *core.Event, now time.Time) error {
	if p.cfg.ContentMode == StructuredMode {
		sink.add("", hdrContentType, ContentTypeStructured)
		sink.add("", hdrDeduplicationID, e.ID.String())
		return p.optionHeaders(sink, e, now)
	}
	ce := core.CloudEventHeaders(*e)
	// One event always encodes to the same bytes (requests are reproducible
	// in tests and logs): the attributes go in a fixed order, the few
	// remaining headers (trace context, custom) sorted after them.
	var restBuf [8]string
	rest := restBuf[:0]
	for k, v := range ce {
		if !knownAttribute(k) {
			if err := checkHeaderName(k); err != nil {
				return core.Permanent(&core.ValidationError{EventID: e.ID, Field: "Headers", Reason: err.Error()})
			}
			rest = append(rest, k)
		}
		if err := checkHeaderValue(k, v); err != nil {
			return core.Permanent(&core.ValidationError{EventID: e.ID, Field: "Headers", Reason: err.Error()})
		}
	}
	slices.Sort(rest)

	sink.add("", hdrContentType, contentTypeJSON)
	// The event ID is the deduplication ID: a relay that republishes an event
	// after a crash is answered "deduplicated" within QStash's window, and the
	// consumer's Deduper covers what falls outside it.
	sink.add("", hdrDeduplicationID, ce[core.HeaderID])
	for _, k := range attributeOrder {
		if v, ok := ce[k]; ok {
			sink.add(forwardPrefix, k, v)
		}
	}
	for _, k := range rest {
		sink.add(forwardPrefix, k, ce[k])
	}
	return p.optionHeaders(sink, e, now)
}

// optionHeaders emits the configured Upstash-* options for e.
func (p *Publisher) optionHeaders(sink headerSink, e *core.Event, now time.Time) error {
	for _, h := range p.static {
		if h[0] == hdrDelay && e.AvailableAt.After(now) {
			continue // Not-Before below wins; sending both would be ambiguous
		}
		sink.add("", h[0], h[1])
	}
	if e.AvailableAt.After(now) {
		// Rounded up: QStash counts in seconds and must not deliver early.
		nb := e.AvailableAt.Unix()
		if e.AvailableAt.Nanosecond() > 0 {
			nb++
		}
		sink.add("", hdrNotBefore, strconv.FormatInt(nb, 10))
	}
	if fc := p.cfg.FlowControl; fc != nil {
		if key := fc.Key(*e); key != "" {
			if err := checkHeader(hdrFlowControlKey, key); err != nil {
				return core.Permanent(fmt.Errorf("qstash: flow-control key for event %s: %w", e.ID, err))
			}
			sink.add("", hdrFlowControlKey, key)
			sink.add("", hdrFlowControlValue, p.flowValue)
		}
	}
	return nil
}

// staticHeaders are the option headers that are the same for every message,
// computed once at construction.
func staticHeaders(c *PublisherConfig) [][2]string {
	var h [][2]string
	if c.Retries != nil {
		h = append(h, [2]string{hdrRetries, strconv.Itoa(*c.Retries)})
	}
	if c.RetryDelay != "" {
		h = append(h, [2]string{hdrRetryDelay, c.RetryDelay})
	}
	if c.Timeout > 0 {
		h = append(h, [2]string{hdrTimeout, formatDuration(c.Timeout)})
	}
	if c.Delay > 0 {
		h = append(h, [2]string{hdrDelay, formatDuration(c.Delay)})
	}
	if c.Callback != "" {
		h = append(h, [2]string{hdrCallback, c.Callback})
	}
	if c.FailureCallback != "" {
		h = append(h, [2]string{hdrFailureCallback, c.FailureCallback})
	}
	if c.Label != "" {
		h = append(h, [2]string{hdrLabel, c.Label})
	}
	return h
}

// attributeOrder lists the CloudEvents attributes core.CloudEventHeaders
// may set, in the order they are sent. Content-type is not among them: it
// is sent as the message's own Content-Type.
var attributeOrder = [...]string{
	core.HeaderSpecVersion, core.HeaderID, core.HeaderType, core.HeaderSource, core.HeaderTime,
	core.HeaderSubject, core.HeaderAggregateType, core.HeaderSchemaVersion, core.HeaderSequence,
}

func knownAttribute(k string) bool {
	if k == core.HeaderContentType {
		return true
	}
	for _, a := range attributeOrder {
		if k == a {
			return true
		}
	}
	return false
}

// checkHeaderName and checkHeaderValue refuse what net/http would refuse to
// send (a client error that would look transient and be retried forever)
// and what the JSON encoder cannot carry unchanged (invalid UTF-8).
func checkHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("header name %q is not an HTTP token: use letters, digits and -", name)
		}
	}
	return nil
}

func checkHeaderValue(name, value string) error {
	ascii := true
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("value of header %q contains control characters", name)
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	if !ascii && !utf8.ValidString(value) {
		return fmt.Errorf("value of header %q is not valid UTF-8", name)
	}
	return nil
}

func checkHeader(name, value string) error {
	if err := checkHeaderName(name); err != nil {
		return err
	}
	return checkHeaderValue(name, value)
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// appendBatchElement writes one element of a /v2/batch request:
// {"destination":..., "headers":{...}, "body":..., "queue":...}.
// The body must be valid UTF-8 (see batchable). scratch is a buffer the
// structured-mode body is built in before it is written as a JSON string;
// it is reused across elements.
func (p *Publisher) appendBatchElement(b []byte, scratch *[]byte, e *core.Event, t Target, now time.Time) ([]byte, error) {
	var body []byte
	if p.cfg.ContentMode == StructuredMode {
		var err error
		if *scratch, err = appendStructured((*scratch)[:0], e); err != nil {
			return b, core.Permanent(err)
		}
		body = *scratch
	} else {
		body = e.Payload
	}
	mark := len(b)
	b = append(b, `{"destination":"`...)
	b = appendJSONEscaped(b, t.destination())
	b = append(b, `","headers":{`...)
	sink := jsonHeaderSink{b: b, first: true}
	if err := p.messageHeaders(&sink, e, now); err != nil {
		return b[:mark], err
	}
	b = sink.b
	b = append(b, `},"body":"`...)
	b = appendJSONEscaped(b, body)
	b = append(b, '"')
	if t.Queue != "" {
		// Omitted rather than sent as "": QStash reads both as "no queue".
		b = append(b, `,"queue":"`...)
		b = appendJSONEscaped(b, t.Queue)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// batchable reports whether e's body can travel as a JSON string in a batch
// element unchanged. JSON strings hold Unicode text: invalid UTF-8 would be
// replaced, so in binary mode such a payload is published on its own with a
// raw body. A structured-mode body is always UTF-8 (a payload that is not
// JSON goes in base64).
func (p *Publisher) batchable(e *core.Event) bool {
	return p.cfg.ContentMode == StructuredMode || utf8.Valid(e.Payload)
}

// appendJSONEscaped appends s escaped for the inside of a JSON string. s must
// be valid UTF-8; multi-byte sequences are copied as they are. It is
// hand-written because encoding/json would need a map per message (sorted,
// reflected) or an intermediate []byte per string; the relay's hot path
// encodes thousands of headers per second.
func appendJSONEscaped[T ~string | ~[]byte](b []byte, s T) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	return append(b, s[start:]...)
}

// bodyPool recycles batch request buffers. A buffer goes back only once the
// HTTP transport has closed the request body (see sharedBody), since a
// RoundTripper may still read the body after Do returns.
type bodyPool struct{ p sync.Pool }

// maxPooledBody keeps one huge batch from pinning its buffer forever.
const maxPooledBody = 4 << 20

func (bp *bodyPool) get() *[]byte {
	if v, ok := bp.p.Get().(*[]byte); ok {
		return v
	}
	b := make([]byte, 0, 64<<10)
	return &b
}

func (bp *bodyPool) put(b *[]byte) {
	if cap(*b) > maxPooledBody {
		return
	}
	*b = (*b)[:0]
	bp.p.Put(b)
}

// sharedBody is a reference-counted request body over a pooled buffer. The
// publisher holds one reference, and each reader handed to the transport
// (the first body and any GetBody copy for a retry on a fresh connection)
// holds one until it is closed. The last release returns the buffer.
type sharedBody struct {
	mu   sync.Mutex
	buf  *[]byte
	refs int
	pool *bodyPool
}

func (s *sharedBody) reader() *bodyReader {
	s.mu.Lock()
	s.refs++
	s.mu.Unlock()
	r := &bodyReader{s: s}
	r.r.Reset(*s.buf)
	return r
}

func (s *sharedBody) release() {
	s.mu.Lock()
	s.refs--
	done := s.refs == 0
	s.mu.Unlock()
	if done {
		s.pool.put(s.buf)
	}
}

// bodyReader reads a sharedBody. Read and Close are serialized so the buffer
// cannot be recycled under a concurrent read.
type bodyReader struct {
	mu     sync.Mutex
	r      bytes.Reader
	s      *sharedBody
	closed bool
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errBodyClosed
	}
	return r.r.Read(p)
}

func (r *bodyReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.r.Reset(nil)
		r.s.release()
	}
	return nil
}
