package qstash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// Why not the official SDK (github.com/upstash/qstash-go v1.0.0) for
// publishing: it takes no context.Context, so the relay could not cancel a
// publish at its PublishTimeout and a lease could expire mid-request; it
// prefixes every custom header with Upstash-Forward-, so flow control, retry
// delay and labels cannot be set (in batches not at all); it never closes
// response bodies, which leaks connections under load; it loses the HTTP
// status when an error body is not JSON, so 429 and 5xx cannot be told from
// 4xx; it panics on a missing token instead of returning an error; and it
// reads QSTASH_URL from the environment, overriding the configuration. The
// publish path is therefore written against the HTTP API, which is small. The
// SDK is still the reference client: the tests check our signatures against
// its Receiver, and qstashdev is tested with its Client. Its types are not
// re-exported either: SigningKeys is two strings, and tying this package's
// API to the SDK's versions would buy nothing.

// Publisher publishes events to QStash. It implements core.Publisher and is
// safe for concurrent use.
type Publisher struct {
	cfg       PublisherConfig
	client    *http.Client
	ownClient bool
	auth      string
	static    [][2]string
	flowValue string
	bodies    bodyPool
}

var _ core.Publisher = (*Publisher)(nil)

var errBodyClosed = errors.New("qstash: request body read after close")

// NewPublisher validates cfg and returns a Publisher. The error, matching
// core.ErrInvalidConfig, names the field to fix.
func NewPublisher(cfg *PublisherConfig) (*Publisher, error) {
	if cfg == nil {
		return nil, &core.ConfigError{Field: "PublisherConfig", Reason: "is nil: pass at least a Token and a Destination"}
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Publisher{
		cfg:       c,
		client:    c.HTTPClient,
		ownClient: cfg.HTTPClient == nil,
		auth:      "Bearer " + c.Token,
		static:    staticHeaders(&c),
	}
	if c.FlowControl != nil {
		p.flowValue = c.FlowControl.value()
	}
	return p, nil
}

// Close releases the idle connections of the HTTP client the Publisher made
// for itself (a client passed in PublisherConfig is left alone). The
// Publisher must not be used afterwards.
func (p *Publisher) Close() error {
	if p.ownClient {
		p.client.CloseIdleConnections()
	}
	return nil
}

// Publish sends events to QStash: one /v2/publish request for a single event,
// /v2/batch requests (up to MaxBatchSize events each) otherwise. It returns
// nil when QStash accepted every event (a deduplicated event counts as
// accepted), a *core.BatchError aligned with events when only some were, or
// the error that failed them all.
//
// Errors are classified for the relay by who can fix them. What only the
// event causes is permanent (core.Permanent): a message larger than the
// plan allows, an invalid Event.Destination, headers that cannot be sent.
// What the configuration causes is transient and matches ErrConfiguration,
// with the fix in its text: QStash's other 4xx answers (a refused token, an
// unknown URL group or queue, a destination or option QStash refuses) and
// events no route sends anywhere. 429, 5xx, network errors and ctx's end are
// transient too, and a 429 carries the announced reset time
// (core.RetryAfterHint). A batch refused for its size is sent again one
// event at a time.
func (p *Publisher) Publish(ctx context.Context, events []core.Event) error {
	if len(events) == 0 {
		return nil
	}
	now := p.cfg.Clock.Now()
	be := core.NewBatchError(len(events))
	targets := make([]Target, len(events))
	batch := make([]int, 0, len(events))
	var solo []int
	for i := range events {
		t, err := p.route(&events[i])
		if err != nil {
			be.Set(i, err)
			continue
		}
		targets[i] = t
		if p.batchable(&events[i]) {
			batch = append(batch, i)
		} else {
			solo = append(solo, i)
		}
	}

	var whole error // the last request-level error
	for len(batch) > 0 {
		n := min(len(batch), p.cfg.MaxBatchSize)
		chunk := batch[:n]
		batch = batch[n:]
		if err := ctx.Err(); err != nil {
			whole = fmt.Errorf("qstash: publish: %w", err)
			for _, i := range chunk {
				be.Set(i, whole)
			}
			continue
		}
		if n == 1 {
			i := chunk[0]
			whole = p.publishOne(ctx, &events[i], targets[i], now)
			be.Set(i, whole)
			continue
		}
		if err := p.publishBatch(ctx, events, targets, chunk, now, be); err != nil {
			whole = err
		}
	}
	for _, i := range solo {
		if err := ctx.Err(); err != nil {
			whole = fmt.Errorf("qstash: publish: %w", err)
		} else {
			whole = p.publishOne(ctx, &events[i], targets[i], now)
		}
		be.Set(i, whole)
	}
	// One error that failed every event (a single request, or ctx ending
	// before the first) is returned as it is, so the caller's log shows it
	// rather than a batch summary.
	if whole != nil && allSame(be.Errs, whole) {
		return whole
	}
	return be.ErrOrNil()
}

// allSame reports whether every entry of errs is err itself. The errors this
// package creates are pointers, so the comparison cannot panic.
func allSame(errs []error, err error) bool {
	for _, e := range errs {
		if e != err {
			return false
		}
	}
	return true
}

// route finds e's target (see PublisherConfig.Route).
func (p *Publisher) route(e *core.Event) (Target, error) {
	if p.cfg.Route != nil {
		t, err := p.cfg.Route(*e)
		if err != nil {
			return Target{}, fmt.Errorf("qstash: route event %s: %w", e.ID, err)
		}
		if err := t.validate(); err != nil {
			// Route is configuration code: a target it gets wrong is fixed
			// by deploying it again, after which the events still pending
			// go out.
			return Target{}, &misconfigured{fmt.Errorf("qstash: PublisherConfig.Route returned an invalid target for event %s of type %q: %w", e.ID, e.Type, err)}
		}
		return t, nil
	}
	t, ok := p.cfg.Routes[e.Type]
	if !ok {
		t = p.cfg.Destination
	}
	if e.Destination != "" {
		d, err := ParseTarget(e.Destination)
		if err != nil {
			return Target{}, core.Permanent(fmt.Errorf("qstash: event %s: Destination: %w", e.ID, err))
		}
		d.Queue = t.Queue
		return d, nil
	}
	if t.IsZero() {
		// Configuration, not the event: a relay running before the route
		// for a new event type is deployed must not dead-letter its events.
		return Target{}, &misconfigured{fmt.Errorf("%w %s of type %q: set PublisherConfig.Destination, a route for the type, or Event.Destination", ErrNoRoute, e.ID, e.Type)}
	}
	return t, nil
}

// publishPath is the API path for a single message to t. The destination goes
// in unescaped, as the official SDKs send it: QStash reads the rest of the
// path (and a query string, which is the destination's own) as the URL.
func publishPath(t Target) string {
	if t.Queue != "" {
		return "/v2/enqueue/" + t.Queue + "/" + t.destination()
	}
	return "/v2/publish/" + t.destination()
}

// publishOne sends a single event with /v2/publish (or /v2/enqueue).
func (p *Publisher) publishOne(ctx context.Context, e *core.Event, t Target, now time.Time) error {
	if len(e.Payload) == 0 {
		return core.Permanent(&core.ValidationError{EventID: e.ID, Field: "Payload", Reason: "is empty: the consumer could not decode it"})
	}
	h := make(http.Header, 16)
	if err := p.messageHeaders(httpHeaderSink(h), e, now); err != nil {
		return err
	}
	body := []byte(e.Payload)
	if p.cfg.ContentMode == StructuredMode {
		var err error
		if body, err = appendStructured(make([]byte, 0, len(e.Payload)+512), e); err != nil {
			return core.Permanent(err)
		}
	}
	// A bytes.Reader lets net/http set ContentLength and GetBody, so a
	// request on a keep-alive connection the server just closed is retried.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.BaseURL+publishPath(t), bytes.NewReader(body))
	if err != nil {
		return core.Permanent(fmt.Errorf("qstash: build request for event %s: %w", e.ID, err))
	}
	h["Authorization"] = []string{p.auth}
	req.Header = h
	resp, err := p.client.Do(req)
	if err != nil {
		return transportError(err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return errorFromResponse(resp, t.String(), now)
}

// publishBatch sends events[chunk] in one /v2/batch request and records the
// per-event outcome in be. When the request as a whole failed, it records
// that error for every event it sent and returns it.
func (p *Publisher) publishBatch(ctx context.Context, events []core.Event, targets []Target, chunk []int, now time.Time, be *core.BatchError) error {
	buf := p.bodies.get()
	b := append((*buf)[:0], '[')
	var scratch []byte
	sent := make([]int, 0, len(chunk))
	for _, i := range chunk {
		if len(events[i].Payload) == 0 {
			be.Set(i, core.Permanent(&core.ValidationError{EventID: events[i].ID, Field: "Payload", Reason: "is empty: the consumer could not decode it"}))
			continue
		}
		if len(sent) > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = p.appendBatchElement(b, &scratch, &events[i], targets[i], now); err != nil {
			if len(sent) > 0 {
				b = b[:len(b)-1] // drop the comma written for it
			}
			be.Set(i, err)
			continue
		}
		sent = append(sent, i)
	}
	b = append(b, ']')
	*buf = b
	if len(sent) == 0 {
		p.bodies.put(buf)
		return nil
	}

	err := p.sendBatch(ctx, buf, sent, targets, now, be)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.cause() == causeEvent {
		// A batch refused for its size says nothing about any one event:
		// sent alone, each is accepted or refused on its own merits, so only
		// an event too large by itself is dead-lettered.
		for _, i := range sent {
			be.Set(i, p.publishOne(ctx, &events[i], targets[i], now))
		}
		return nil
	}
	if err != nil {
		for _, i := range sent {
			be.Set(i, err)
		}
	}
	return err
}

// sendBatch sends the encoded batch in buf and reads the per-message outcome.
func (p *Publisher) sendBatch(ctx context.Context, buf *[]byte, sent []int, targets []Target, now time.Time, be *core.BatchError) error {
	body := &sharedBody{buf: buf, refs: 1, pool: &p.bodies}
	defer body.release()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.BaseURL+"/v2/batch", http.NoBody)
	if err != nil {
		return core.Permanent(fmt.Errorf("qstash: build batch request: %w", err))
	}
	req.Body = body.reader()
	req.GetBody = func() (io.ReadCloser, error) { return body.reader(), nil }
	req.ContentLength = int64(len(*buf))
	req.Header = http.Header{
		"Authorization": {p.auth},
		"Content-Type":  {contentTypeJSON},
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return transportError(err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorFromResponse(resp, "", now)
	}

	// QStash answers an array aligned with the request: an object (or, for a
	// URL group, an array of objects) per message, or {"error": ...} for a
	// message it refused while accepting the others.
	var results []batchResult
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBatchResponseBytes))
	if err == nil {
		err = json.Unmarshal(raw, &results)
	}
	if err != nil {
		return fmt.Errorf("%w: batch answer is not a JSON array of results: %v", ErrUnexpectedResponse, err)
	}
	if len(results) != len(sent) {
		return fmt.Errorf("%w: batch answer has %d results for %d messages", ErrUnexpectedResponse, len(results), len(sent))
	}
	for k, i := range sent {
		switch r := results[k]; {
		case r.err != "":
			be.Set(i, classify(&APIError{StatusCode: resp.StatusCode, Message: r.err, Index: i, Destination: targets[i].String()}))
		case !r.ok:
			be.Set(i, fmt.Errorf("%w: batch result %d has neither messageId nor error", ErrUnexpectedResponse, k))
		}
	}
	return nil
}

// maxBatchResponseBytes bounds a batch answer (about 100 bytes per message;
// URL groups multiply that by their endpoints).
const maxBatchResponseBytes = 16 << 20

// batchResult is one element of a /v2/batch answer.
type batchResult struct {
	ok  bool
	err string
}

func (r *batchResult) UnmarshalJSON(data []byte) error {
	type elem struct {
		MessageID string `json:"messageId"`
		Error     string `json:"error"`
	}
	var one elem
	var many []elem
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &many); err != nil {
			return err
		}
	} else {
		if err := json.Unmarshal(data, &one); err != nil {
			return err
		}
		many = []elem{one}
	}
	// A URL group's message succeeded only if every endpoint's copy did;
	// republishing it is harmless, the copies that went through are
	// deduplicated per endpoint.
	r.ok = len(many) > 0
	for _, e := range many {
		if e.Error != "" {
			if r.err != "" {
				r.err += "; "
			}
			r.err += e.Error
		}
		if e.MessageID == "" {
			r.ok = false
		}
	}
	return nil
}

// transportError wraps a failure to get any answer. It is transient: the
// request may or may not have reached QStash, and the deduplication ID makes
// sending it again safe.
func transportError(err error) error {
	return fmt.Errorf("qstash: publish: %w", err)
}
