package qstash

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/logs"
)

// DefaultMaxBodyBytes is the default body limit of a Receiver: QStash's
// message size limit on the free plan.
const DefaultMaxBodyBytes = 1 << 20

// StatusNonRetryable is the status QStash reads, together with the header
// Upstash-NonRetryable-Error: true, as "fail this message now, do not retry".
const StatusNonRetryable = 489

// ReceiverConfig configures a Receiver. Fields without a default are
// required.
type ReceiverConfig struct {
	// CurrentSigningKey and NextSigningKey are QStash's signing keys
	// (QSTASH_CURRENT_SIGNING_KEY, QSTASH_NEXT_SIGNING_KEY). Both are
	// required unless Regions is set; an empty key is refused, since it
	// would verify tokens anyone can sign.
	CurrentSigningKey string
	NextSigningKey    string
	// Regions holds the signing keys of each QStash region the endpoint
	// receives from, for multi-region accounts: a delivery is verified with
	// the keys of the region its Upstash-Region header names, and one
	// without the header, or from a region not listed, with
	// CurrentSigningKey and NextSigningKey (refused with 401 when those are
	// not set). See VerifierConfig.Regions. Defaults to none.
	Regions map[string]RegionKeys
	// URL is the endpoint's public URL exactly as publishers address it
	// (scheme, host, path and query). The signature's sub claim must equal
	// it; it is configured rather than read from the request, because behind
	// a proxy or load balancer the request's own URL differs.
	URL string
	// Handler applies the event's effect. Required. Wrap a core.Mux to route
	// by event type.
	Handler core.Handler
	// Deduper applies the effect at most once per (Consumer, event ID),
	// recorded in the effect's transaction. Required: QStash delivers at
	// least once, and a relay may publish an event twice.
	Deduper core.Deduper
	// Consumer names this effect in the Deduper, so that two services
	// consuming one event each apply it. Required.
	Consumer string
	// MaxBodyBytes bounds the request body; a larger one is answered 413
	// without any effect. In structured mode the body is the payload plus
	// the event's attributes (a few hundred bytes, more with large custom
	// headers). Defaults to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Leeway is the clock skew tolerated on the token's exp, nbf and iat.
	// Defaults to DefaultLeeway (5s); negative means none.
	Leeway time.Duration
	// Clock tells the time for the token checks and Decision.Duration.
	// Defaults to core.SystemClock.
	Clock core.Clock
	// Logger receives refused requests (Warn, at most 10 lines per 10 s
	// since anyone can send them, the next line counting those left out),
	// handler errors (Warn), panics (Error, with the stack) and handled
	// deliveries (Debug). Tokens are never logged. Defaults to
	// slog.Default() at Warn and above, so a wrong signing key or URL shows
	// up in the service's own logs.
	Logger *slog.Logger
	// ReplayGuard refuses a token already accepted (its jti), so a captured
	// delivery cannot be sent again while its token is valid: the replay is
	// answered 401 with nothing applied. QStash signs every attempt with a
	// token of its own, so its retries pass. Defaults to a
	// NewMemoryReplayGuard for this Receiver, which protects one process: a
	// consumer running several instances behind one URL should share one
	// guard between them (postgres.TokenGuard), or a replay sent to another
	// instance gets through.
	ReplayGuard ReplayGuard
	// AllowBinaryMode makes the Receiver accept CloudEvents binary-mode
	// deliveries (the payload as the body, the event's attributes as ce-*
	// headers), which publishers send with ContentMode BinaryMode. QStash
	// signs only the URL and the body, so in that mode the event's ID, type,
	// source, aggregate, sequence, trace context and custom headers are
	// taken from headers anyone holding a captured delivery can rewrite;
	// the ReplayGuard still accepts each token once. Defaults to false:
	// deliveries that are not structured-mode (Content-Type
	// application/cloudevents+json) are answered 415, and the event is read
	// from the signed body alone.
	AllowBinaryMode bool
	// Middleware wraps the whole dedupe-and-handle step, outside the
	// Deduper, so it sees duplicates too: tracing.HandlerMiddleware goes
	// here, giving every delivery a consumer span on which the dedupe
	// decision is recorded. Middleware that must run inside the effect's
	// transaction belongs on Handler instead. Defaults to none.
	Middleware []core.HandlerMiddleware
	// OnDecision, when set, learns the outcome of every request: applied or
	// duplicate, and why a request failed. Tracing and metrics attach here.
	OnDecision DecisionHook
}

// Receiver is an http.Handler for a QStash consumer endpoint. For each
// request it, in order: refuses non-POST (405); reads at most MaxBodyBytes
// (413 beyond); verifies Upstash-Signature (401); refuses a token its
// ReplayGuard has seen (401); decodes the event from the signed body, a
// CloudEvents structured-mode document (400 when malformed, 415 when the
// delivery is not structured-mode and AllowBinaryMode is off); runs Handler
// through Deduper; and answers 200 only once the effect committed or was
// already recorded. A Permanent
// handler error answers 489 with Upstash-NonRetryable-Error: true; any other
// error, or a panic, answers 500 so that QStash retries. See the package
// documentation for the full table.
type Receiver struct {
	auth     authenticator
	url      string
	handler  core.Handler
	deduper  core.Deduper
	consumer string
	maxBody  int64
	clock    core.Clock
	guard    ReplayGuard
	binary   bool
	log      *slog.Logger
	refusals refusalLimiter
	hook     DecisionHook
	// middleware wraps ApplyOnce (ReceiverConfig.Middleware).
	middleware []core.HandlerMiddleware
}

var _ http.Handler = (*Receiver)(nil)

// NewReceiver validates cfg and returns a Receiver. The error, matching
// core.ErrInvalidConfig, names the field to fix.
func NewReceiver(cfg *ReceiverConfig) (*Receiver, error) {
	if cfg == nil {
		return nil, &core.ConfigError{Field: "ReceiverConfig", Reason: "is nil: pass the signing keys, URL, Handler, Deduper and Consumer"}
	}
	v, err := NewVerifier(&VerifierConfig{
		CurrentSigningKey: cfg.CurrentSigningKey,
		NextSigningKey:    cfg.NextSigningKey,
		Regions:           cfg.Regions,
		Leeway:            cfg.Leeway,
		Clock:             cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	bad := func(field, reason string) error { return &core.ConfigError{Field: field, Reason: reason} }
	switch {
	case cfg.URL == "":
		return nil, bad("URL", "is empty: set the endpoint's public URL exactly as publishers address it, e.g. https://api.example.com/qstash/orders")
	case cfg.Handler == nil:
		return nil, bad("Handler", "is nil: pass the handler that applies the event (a core.Mux, say)")
	case cfg.Deduper == nil:
		return nil, bad("Deduper", "is nil: QStash delivers at least once; pass postgres.NewDeduper(...) so each event applies once")
	case cfg.Consumer == "":
		return nil, bad("Consumer", `is empty: name this effect (e.g. "billing"), the Deduper records (Consumer, event ID)`)
	case cfg.MaxBodyBytes < 0:
		return nil, bad("MaxBodyBytes", "is negative: leave it 0 for the 1 MiB default")
	}
	if err := validateURL(cfg.URL); err != nil {
		return nil, bad("URL", err.Error())
	}
	r := &Receiver{
		auth:     authenticator{verifier: v, url: cfg.URL},
		url:      cfg.URL,
		handler:  core.ChainHandler(cfg.Handler, core.Recover()),
		deduper:  cfg.Deduper,
		consumer: cfg.Consumer,
		maxBody:  cfg.MaxBodyBytes,
		clock:    cfg.Clock,
		guard:    cfg.ReplayGuard,
		binary:   cfg.AllowBinaryMode,
		log:      logs.OrDefault(cfg.Logger),
		hook:     cfg.OnDecision,

		middleware: slices.Clone(cfg.Middleware),
	}
	if r.maxBody == 0 {
		r.maxBody = DefaultMaxBodyBytes
	}
	if r.clock == nil {
		r.clock = core.SystemClock{}
	}
	if r.guard == nil {
		r.guard = NewMemoryReplayGuard(&MemoryReplayGuardConfig{Clock: r.clock})
	}
	r.auth.maxBody, r.auth.guard = r.maxBody, r.guard
	return r, nil
}

// ServeHTTP handles one delivery.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := Decision{Delivery: deliveryFromHeader(r.Header)}
	start := rc.clock.Now()
	ctx := r.Context()
	decide := func(o Outcome, status int, err error) {
		d.Outcome, d.Status, d.Err = o, status, err
		d.Duration = rc.clock.Now().Sub(start)
		rc.logDecision(ctx, &d, r.RemoteAddr)
		if rc.hook != nil {
			rc.hook(ctx, d)
		}
		rc.respond(w, &d)
	}

	body, _, ref := rc.auth.authenticate(ctx, w, r)
	if ref != nil {
		decide(ref.outcome, ref.status, ref.err)
		return
	}

	e, status, err := decodeDelivery(r.Header, body, rc.binary)
	if err != nil {
		decide(OutcomeMalformed, status, err)
		return
	}
	d.Event = e

	applied, err := rc.apply(WithDelivery(ctx, d.Delivery), e)
	switch {
	case err == nil && applied:
		decide(OutcomeApplied, http.StatusOK, nil)
	case err == nil:
		decide(OutcomeDuplicate, http.StatusOK, nil)
	case core.IsPermanent(err):
		decide(OutcomePermanent, StatusNonRetryable, err)
	default:
		status := http.StatusInternalServerError
		if after, ok := core.RetryAfterHint(err); ok && after > 0 {
			// QStash waits as long as a failed response's Retry-After asks.
			w.Header().Set("Retry-After", strconv.FormatInt(int64((after+time.Second-1)/time.Second), 10))
			status = http.StatusServiceUnavailable
		}
		decide(OutcomeTransient, status, err)
	}
}

// apply runs the handler through the Deduper. The handler's panics are
// turned into *core.PanicError inside the effect (so the Deduper rolls its
// transaction back as for any error); a panic in the Deduper itself is
// recovered here, so one bad delivery cannot crash the server.
func (rc *Receiver) apply(ctx context.Context, e core.Event) (applied bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			applied, err = false, &core.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	if len(rc.middleware) == 0 {
		return core.ApplyOnce(ctx, rc.deduper, rc.consumer, rc.handler, e)
	}
	step := core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		var err error
		applied, err = core.ApplyOnce(ctx, rc.deduper, rc.consumer, rc.handler, e)
		return err
	})
	err = core.ChainHandler(step, rc.middleware...).Handle(ctx, e)
	return applied && err == nil, err
}

// respond writes a small JSON body. Error details stay in the logs: the body
// of a failed delivery is kept in QStash's DLQ, outside this service's
// control, and refused requests may come from anyone.
func (rc *Receiver) respond(w http.ResponseWriter, d *Decision) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if d.Outcome == OutcomePermanent {
		h.Set("Upstash-NonRetryable-Error", "true")
	}
	w.WriteHeader(d.Status)
	var body string
	switch d.Outcome {
	case OutcomeApplied, OutcomeDuplicate:
		body = `{"status":"` + d.Outcome.String() + `","eventId":"` + d.Event.ID.String() + `"}`
	case OutcomePermanent, OutcomeTransient:
		body = `{"error":"` + d.Outcome.String() + `","eventId":"` + d.Event.ID.String() + `"}`
	default:
		body = `{"error":"` + d.Outcome.String() + `"}`
	}
	_, _ = io.WriteString(w, body+"\n")
}

func (rc *Receiver) logDecision(ctx context.Context, d *Decision, remote string) {
	level, msg := slog.LevelDebug, "qstash: delivery handled"
	var pe *core.PanicError
	refused := false
	switch {
	case errors.As(d.Err, &pe):
		level, msg = slog.LevelError, "qstash: handler panicked"
	case d.Outcome == OutcomeUnauthorized || d.Outcome == OutcomeMalformed || d.Outcome == OutcomeTooLarge:
		level, msg, refused = slog.LevelWarn, "qstash: delivery refused", true
	case d.Outcome == OutcomeTransient && errors.Is(d.Err, core.ErrSequenceGap):
		// An early delivery is routine with a SequencedDeduper: it comes
		// back after its predecessor. The sequencer warns about the gaps
		// that last (GapAlertAfter), so a line per delivery would only
		// drown them.
		level, msg = slog.LevelDebug, "qstash: delivery ahead of its predecessor"
	case d.Err != nil:
		level, msg = slog.LevelWarn, "qstash: delivery failed"
	}
	if !rc.log.Enabled(ctx, level) {
		return // spare the hot path the attributes
	}
	suppressed := 0
	if refused {
		ok, n := rc.refusals.allow(rc.clock.Now())
		if !ok {
			return
		}
		suppressed = n
	}
	attrs := []slog.Attr{
		slog.String("outcome", d.Outcome.String()),
		slog.Int("status", d.Status),
		// Unsigned headers: bounded, since the sender chooses them.
		slog.String("message_id", truncate(d.Delivery.MessageID)),
		slog.Int("retried", d.Delivery.Retried),
	}
	if refused {
		attrs = append(attrs, slog.String("remote_addr", remote))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	if !d.Event.ID.IsZero() {
		attrs = append(attrs, slog.String("event_id", d.Event.ID.String()), slog.String("event_type", d.Event.Type))
	}
	if d.Err != nil {
		attrs = append(attrs, slog.Any("error", d.Err))
	}
	if pe != nil {
		attrs = append(attrs, slog.String("stack", string(pe.Stack)))
	}
	rc.log.LogAttrs(ctx, level, msg, attrs...)
}
