package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// WebhookConfig configures a WebhookPublisher. Only URL is required.
type WebhookConfig struct {
	// URL receives every event as an HTTP POST. An event whose Destination
	// is an absolute http(s) URL goes there instead. Required.
	URL string
	// Client sends the requests. Defaults to a client with a 30s timeout
	// that does not follow redirects (a redirected POST loses its body).
	Client *http.Client
	// Concurrency bounds the requests of one batch in flight at once.
	// Defaults to 8.
	Concurrency int
	// Header is added to every request: an Authorization token, say.
	Header http.Header
}

// WebhookPublisher is a core.Publisher that POSTs each event to an HTTP
// endpoint in CloudEvents binary mode: the payload is the body, the event's
// attributes and trace context are ce-* and traceparent headers
// (core.CloudEventHeaders), and Idempotency-Key carries the event ID so the
// receiver can deduplicate redeliveries.
//
// It is written against package core alone, the way any platform team can
// add a transport: it needs nothing from the rest of outboxkit.
//
// How answers map to the relay's decisions:
//
//	2xx                      published
//	408, 429, 5xx, 3xx       transient: retried with backoff, no sooner than
//	                         a Retry-After the endpoint sent
//	other 4xx                permanent: dead-lettered at once (retrying a
//	                         request the endpoint rejected cannot succeed)
//	network error, ctx done  transient
type WebhookPublisher struct {
	url         string
	client      *http.Client
	concurrency int
	header      http.Header
}

var _ core.Publisher = (*WebhookPublisher)(nil)

// NewWebhookPublisher validates cfg and returns a publisher. Validating
// here, not at the first publish, makes a typo fail at start-up.
func NewWebhookPublisher(cfg WebhookConfig) (*WebhookPublisher, error) {
	if err := validateURL(cfg.URL); err != nil {
		return nil, &core.ConfigError{Field: "URL", Reason: err.Error()}
	}
	if cfg.Concurrency < 0 {
		return nil, &core.ConfigError{Field: "Concurrency", Reason: "must not be negative (0 means the default, 8)"}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			Timeout:       30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &WebhookPublisher{url: cfg.URL, client: cfg.Client, concurrency: cfg.Concurrency, header: cfg.Header.Clone()}, nil
}

func validateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http(s) URL such as https://hooks.example.com/orders", s)
	}
	return nil
}

// Publish POSTs every event, up to Concurrency at a time, and reports each
// event's outcome in a *core.BatchError aligned with events, so the relay
// marks the successes of a partly failed batch as published.
func (p *WebhookPublisher) Publish(ctx context.Context, events []core.Event) error {
	if len(events) == 0 {
		return nil
	}
	be := core.NewBatchError(len(events))
	sem := make(chan struct{}, p.concurrency)
	var wg sync.WaitGroup
	for i := range events {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			// The relay's PublishTimeout or shutdown: the events not yet
			// sent fail (transiently) with the reason, and the relay
			// retries or releases them.
			for j := i; j < len(events); j++ {
				be.Set(j, fmt.Errorf("webhook: not sent: %w", ctx.Err()))
			}
			wg.Wait()
			return be.ErrOrNil()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// Each goroutine writes its own index: no lock needed.
			be.Set(i, p.post(ctx, &events[i]))
		}()
	}
	wg.Wait()
	return be.ErrOrNil()
}

// post sends one event and classifies the answer.
func (p *WebhookPublisher) post(ctx context.Context, e *core.Event) error {
	target := p.url
	if validateURL(e.Destination) == nil {
		target = e.Destination
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(e.Payload))
	if err != nil {
		// A request that cannot be built never will be. The error is the
		// event's own outcome and dead-letter record: it names no ID, so
		// equal failures read the same.
		return core.Permanent(fmt.Errorf("webhook: cannot build the request: %w", err))
	}
	for k, v := range p.header {
		req.Header[k] = v
	}
	for k, v := range core.CloudEventHeaders(*e) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Idempotency-Key", e.ID.String())

	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: cannot reach the endpoint: %w", err) // transient
	}
	// Drain (a bounded amount) so the connection is reused.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	statusErr := &StatusError{StatusCode: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout,
		resp.StatusCode >= 500, resp.StatusCode < 400:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return core.RetryAfter(statusErr, d)
		}
		return statusErr
	default:
		return core.Permanent(statusErr)
	}
}

// StatusError is a non-2xx answer from the endpoint. Match it with
// errors.As to read the status.
type StatusError struct {
	StatusCode int
	// Body is the start of the response body, for the dead-letter record.
	Body string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("webhook: endpoint answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
