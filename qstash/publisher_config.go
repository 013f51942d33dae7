package qstash

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/qregion"
)

// DefaultBaseURL is the QStash API of Upstash's cloud.
const DefaultBaseURL = "https://qstash.upstash.io"

// PublisherConfig configures a Publisher. Token is required; everything else
// says its default. Events are routed by Route when set, otherwise by
// Event.Destination, Routes[event.Type] or Destination, in that order.
//
// The message options (Retries through Label) apply to every message and map
// one to one onto QStash's Upstash-* request headers.
type PublisherConfig struct {
	// BaseURL is the address of the QStash API. Defaults to DefaultBaseURL.
	// Library code never reads QSTASH_URL (the official SDK does, which makes
	// a test's configuration depend on the shell it runs in): programs pass
	// os.Getenv("QSTASH_URL") here themselves to point at qstashdev.
	BaseURL string
	// Region is the QStash region to publish to, for accounts in a region
	// other than QStash's default or in several (each region is a service
	// of its own, with its own token): "EU_CENTRAL_1" or "US_EAST_1"
	// (dashes and lower case are read too). It makes the region's API
	// (https://qstash-us-east-1.upstash.io) the default of BaseURL; a
	// BaseURL that is set wins, so a test can point a regional publisher at
	// qstashdev. Use one Publisher per region. Defaults to "", which
	// leaves BaseURL's default, DefaultBaseURL (EU_CENTRAL_1).
	Region string
	// Token authorizes requests: the QSTASH_TOKEN of the Upstash console (or
	// qstashdev.DefaultToken for the local server). Required.
	Token string
	// HTTPClient sends the requests. Defaults to a client with a 30s overall
	// timeout, up to 64 idle connections kept to QStash, and redirects not
	// followed (a redirected POST would lose its body and its credentials
	// would go to another host). Bring your own for proxies or tracing; it
	// should not follow redirects either. Publish also honours its ctx.
	HTTPClient *http.Client

	// Destination is where events go when neither Event.Destination nor
	// Routes name a target. Optional: without it (and without a matching
	// route) an event fails with a transient error matching ErrNoRoute and
	// ErrConfiguration, and stays pending until a route exists.
	Destination Target
	// Routes maps event types to targets, taking precedence over
	// Destination. Optional.
	Routes map[string]Target
	// Route, when set, decides every event's target, replacing Destination,
	// Routes and the Event.Destination override (it sees the event, so it can
	// honour Destination itself). An error fails only that event and is
	// retried like any publish error: wrap it with core.Permanent when
	// retrying cannot help. An invalid target it returns is treated as
	// configuration (transient, matching ErrConfiguration). Optional; set it
	// or Destination/Routes, not both.
	//
	// Without Route, a non-empty Event.Destination (read with ParseTarget)
	// replaces the URL or URL group of the target that would otherwise apply
	// and keeps its Queue, so events overridden one by one keep the queue's
	// ordering.
	Route func(core.Event) (Target, error)

	// Retries is how many times QStash retries a failed delivery
	// (Upstash-Retries; attempts = 1 + Retries). Defaults to nil, which
	// leaves QStash's default (3). Use a pointer to 0 for no retries.
	Retries *int
	// RetryDelay is QStash's retry-delay expression in milliseconds over the
	// variable `retried` (Upstash-Retry-Delay), for example
	// "pow(2, retried) * 1000". Defaults to "", QStash's own backoff.
	RetryDelay string
	// Timeout bounds each delivery attempt (Upstash-Timeout), in whole
	// seconds. Defaults to 0, QStash's default for the plan.
	Timeout time.Duration
	// Delay postpones the first delivery of every message (Upstash-Delay), in
	// whole seconds. Defaults to 0. An event whose AvailableAt is still in the
	// future is sent with Upstash-Not-Before = AvailableAt (rounded up to the
	// second) instead, which QStash lets win over Delay.
	Delay time.Duration
	// Callback is a URL QStash calls after every delivery attempt
	// (Upstash-Callback). Defaults to none.
	Callback string
	// FailureCallback is a URL QStash calls when a message has failed for
	// good (Upstash-Failure-Callback). Defaults to none.
	FailureCallback string
	// FlowControl limits deliveries per key (Upstash-Flow-Control-*).
	// Defaults to nil: no limit.
	FlowControl *FlowControl
	// Label tags every message (Upstash-Label), for filtering logs and the
	// DLQ. Defaults to none.
	Label string

	// ContentMode is how each message carries its event. Defaults to
	// StructuredMode: one application/cloudevents+json document holding
	// the attributes and the payload, all of it signed by QStash. Use
	// BinaryMode only for consumers that want the raw payload as the body;
	// a Receiver then needs AllowBinaryMode, and trusts headers QStash does
	// not sign.
	ContentMode ContentMode

	// MaxBatchSize bounds the events sent in one /v2/batch request; a larger
	// Publish is split into several requests, sent one after another.
	// Defaults to 100, the relay's default batch size.
	MaxBatchSize int
	// Clock tells the time, to decide whether AvailableAt is in the future
	// and to turn a rate-limit reset time into a delay. Defaults to
	// core.SystemClock.
	Clock core.Clock
}

// ContentMode is how a message carries its event, in CloudEvents terms.
type ContentMode int

const (
	// StructuredMode sends the event as a CloudEvents structured-mode JSON
	// document (Content-Type application/cloudevents+json, see
	// EncodeStructuredEvent): its ID, type, source, aggregate, sequence,
	// schema version, time, trace context and custom headers travel in the
	// body beside the payload ("data"), so QStash's signature, which covers
	// the body, covers them all. The default.
	StructuredMode ContentMode = iota
	// BinaryMode sends the payload as the body, unchanged, and the
	// attributes as CloudEvents binary-mode headers (ce-id, ce-type, ...,
	// traceparent, ce-x-*), each sent as Upstash-Forward-<name>. QStash does
	// not sign headers: a consumer that keys on them can be fed a captured
	// body under another ID or type.
	BinaryMode
)

// String returns "structured" or "binary".
func (m ContentMode) String() string {
	switch m {
	case StructuredMode:
		return "structured"
	case BinaryMode:
		return "binary"
	}
	return "ContentMode(" + strconv.Itoa(int(m)) + ")"
}

// FlowControl limits how fast QStash delivers the messages that share a key.
// Excess messages wait at QStash; they are not rejected. Set Parallelism,
// Rate or both.
type FlowControl struct {
	// Parallelism is the most deliveries of one key in flight at once. With
	// the default Key, 1 delivers each aggregate's events one at a time.
	Parallelism int
	// Rate is the most deliveries of one key started per Period.
	Rate int
	// Period is the window Rate counts over, in whole seconds. Defaults to
	// QStash's default (one second) when Rate is set.
	Period time.Duration
	// Key returns an event's flow-control key. Defaults to
	// core.Event.AggregateKey ("type/id"), so each aggregate is limited on its
	// own; return a constant to limit all events together. An event whose key
	// is "" is sent without flow control.
	Key func(core.Event) string
}

// value is the Upstash-Flow-Control-Value header, in the form the official
// SDKs send: "parallelism=1, rate=10, period=1m".
func (f *FlowControl) value() string {
	var parts []string
	if f.Parallelism > 0 {
		parts = append(parts, "parallelism="+strconv.Itoa(f.Parallelism))
	}
	if f.Rate > 0 {
		parts = append(parts, "rate="+strconv.Itoa(f.Rate))
	}
	if f.Period > 0 {
		parts = append(parts, "period="+formatDuration(f.Period))
	}
	return strings.Join(parts, ", ")
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c PublisherConfig) WithDefaults() PublisherConfig {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
		if r, ok := qregion.Normalize(c.Region); ok {
			c.BaseURL = qregion.BaseURL(r)
		}
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.HTTPClient == nil {
		c.HTTPClient = newDefaultHTTPClient()
	}
	if c.MaxBatchSize == 0 {
		c.MaxBatchSize = 100
	}
	if c.Clock == nil {
		c.Clock = core.SystemClock{}
	}
	if c.FlowControl != nil && c.FlowControl.Key == nil {
		fc := *c.FlowControl
		fc.Key = func(e core.Event) string { return e.AggregateKey() }
		c.FlowControl = &fc
	}
	return c
}

func newDefaultHTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		// The default of 2 idle connections per host would make concurrent
		// relays open and close a connection per request.
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (c PublisherConfig) validate() error {
	bad := func(field, reason string, args ...any) error {
		return &core.ConfigError{Field: field, Reason: fmt.Sprintf(reason, args...)}
	}
	if err := validateURL(c.BaseURL); err != nil {
		return bad("BaseURL", "%v", err)
	}
	if _, ok := qregion.Normalize(c.Region); c.Region != "" && !ok {
		return bad("Region", "is %q, not a QStash region: use %s, or leave it empty", c.Region, strings.Join(qregion.All, " or "))
	}
	if c.Token == "" {
		return bad("Token", "is empty: pass the QSTASH_TOKEN from the Upstash console (or qstashdev.DefaultToken for a local server)")
	}
	if strings.ContainsFunc(c.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return bad("Token", "contains spaces or control characters: check for a trailing newline in the environment variable or secret")
	}
	if c.Route != nil && (!c.Destination.IsZero() || len(c.Routes) > 0) {
		return bad("Route", "is set together with Destination or Routes, which it would silently replace: set one or the other")
	}
	if !c.Destination.IsZero() {
		if err := c.Destination.validate(); err != nil {
			return bad("Destination", "%v", err)
		}
	}
	for typ, t := range c.Routes {
		if typ == "" {
			return bad("Routes", "has an empty event type")
		}
		if err := t.validate(); err != nil {
			return bad("Routes["+strconv.Quote(typ)+"]", "%v", err)
		}
	}
	if c.Retries != nil && *c.Retries < 0 {
		return bad("Retries", "is %d: use 0 for no retries, or nil for QStash's default", *c.Retries)
	}
	if err := headerSafe(c.RetryDelay); err != nil {
		return bad("RetryDelay", "%v", err)
	}
	if err := wholeSeconds(c.Timeout); err != nil {
		return bad("Timeout", "%v", err)
	}
	if err := wholeSeconds(c.Delay); err != nil {
		return bad("Delay", "%v", err)
	}
	if c.Callback != "" {
		if err := validateURL(c.Callback); err != nil {
			return bad("Callback", "%v", err)
		}
	}
	if c.FailureCallback != "" {
		if err := validateURL(c.FailureCallback); err != nil {
			return bad("FailureCallback", "%v", err)
		}
	}
	if fc := c.FlowControl; fc != nil {
		switch {
		case fc.Parallelism < 0 || fc.Rate < 0:
			return bad("FlowControl", "Parallelism and Rate must not be negative")
		case fc.Parallelism == 0 && fc.Rate == 0:
			return bad("FlowControl", "sets neither Parallelism nor Rate: set one, or leave FlowControl nil")
		case fc.Period != 0 && fc.Rate == 0:
			return bad("FlowControl.Period", "is set without Rate: Period is the window Rate counts over")
		}
		if err := wholeSeconds(fc.Period); err != nil {
			return bad("FlowControl.Period", "%v", err)
		}
	}
	if err := headerSafe(c.Label); err != nil {
		return bad("Label", "%v", err)
	}
	if c.ContentMode != StructuredMode && c.ContentMode != BinaryMode {
		return bad("ContentMode", "is %d: use qstash.StructuredMode (the default) or qstash.BinaryMode", int(c.ContentMode))
	}
	if c.MaxBatchSize < 1 {
		return bad("MaxBatchSize", "is %d: must be at least 1", c.MaxBatchSize)
	}
	return nil
}

func headerSafe(s string) error {
	if strings.ContainsAny(s, "\x00\r\n") {
		return fmt.Errorf("%q contains NUL or line breaks, which cannot travel in a header", s)
	}
	return nil
}

func wholeSeconds(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("is %s: must not be negative", d)
	}
	if d%time.Second != 0 {
		return fmt.Errorf("is %s: QStash counts in whole seconds, use %s", d, d.Round(time.Second))
	}
	return nil
}

// formatDuration writes d the way QStash reads durations: "1d10h30m", "45s".
func formatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b []byte
	for _, u := range [...]struct {
		unit time.Duration
		name byte
	}{{24 * time.Hour, 'd'}, {time.Hour, 'h'}, {time.Minute, 'm'}, {time.Second, 's'}} {
		if n := d / u.unit; n > 0 {
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, u.name)
			d -= n * u.unit
		}
	}
	if len(b) == 0 {
		return "0s"
	}
	return string(b)
}
