package qstash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/logs"
)

// DefaultDrainBudget is how long a DrainHandler run may take by default:
// well under the time limits of serverless platforms (Vercel's and
// Netlify's defaults are 10 to 60 s depending on the plan; Cloud Run,
// Lambda and Cloud Functions allow minutes), and under QStash's default
// delivery timeout.
const DefaultDrainBudget = 25 * time.Second

// drainSettleReserve is the most time kept, after the last batch's
// publish, for its settle: one store round trip. A budget too short to
// spare it keeps half of what PublishTimeout leaves.
const drainSettleReserve = time.Second

// DrainHandlerConfig configures a DrainHandler. Fields without a default
// are required.
type DrainHandlerConfig struct {
	// CurrentSigningKey, NextSigningKey and Regions are QStash's signing
	// keys, as in ReceiverConfig: the schedule's deliveries are verified
	// exactly as a Receiver verifies events.
	CurrentSigningKey string
	NextSigningKey    string
	Regions           map[string]RegionKeys
	// URL is the handler's public URL exactly as the schedule's
	// destination names it: the signature's sub claim must equal it.
	URL string
	// Relay drains the outbox: each run is one Relay.DrainWithin. Required.
	// It is not Run: the process may be frozen or killed between requests,
	// and every run stands alone.
	Relay *core.Relay
	// Budget bounds a run, from the request's arrival to the answer. No
	// batch is claimed after Budget less the relay's PublishTimeout and a
	// second for the settle, so the last batch can finish in time; a
	// publish still running at Budget is cancelled and its events
	// released, claimable again at once. Set it under the platform's time
	// limit and QStash's delivery timeout (Upstash-Timeout). It must exceed
	// the relay's PublishTimeout. Defaults to DefaultDrainBudget (25s).
	Budget time.Duration
	// MaxBodyBytes bounds the request body, which the handler reads only to
	// verify its hash: a schedule's body is usually empty. Defaults to
	// 64 KiB.
	MaxBodyBytes int64
	// Leeway and Clock are as in ReceiverConfig: the clock skew tolerated
	// on the token's times, and the clock of the token checks. Budget is
	// measured in real time whatever the Clock.
	Leeway time.Duration
	Clock  core.Clock
	// ReplayGuard refuses a token already accepted, as in ReceiverConfig.
	// A replayed schedule delivery could only run a drain, which is safe,
	// but it is refused all the same. Defaults to a NewMemoryReplayGuard.
	ReplayGuard ReplayGuard
	// Logger receives refused requests and failed runs (Warn) and every
	// run (Debug). Defaults to slog.Default() at Warn and above.
	Logger *slog.Logger
	// OnRun, when set, learns about every run that was not refused: what
	// it did and how long it took. Metrics attach here.
	OnRun func(ctx context.Context, run DrainRun)
}

// DrainRun describes one run of a DrainHandler.
type DrainRun struct {
	// Delivery is the schedule's delivery (QStash's message ID, retries).
	Delivery Delivery
	// Report is what the drain did.
	Report core.DrainReport
	// Status is how the run ended: "drained" (nothing more due), "more"
	// (the budget ended with events perhaps still due: the next run goes
	// on), "cut" (the budget ended mid-batch, whose events were released)
	// or "failed" (the store failed; Err says why).
	Status string
	// Err is the drain's error, for "failed" and "cut".
	Err error
	// Duration is the run's wall-clock time.
	Duration time.Duration
}

// DrainHandler is an http.Handler that a QStash schedule calls to run the
// outbox's relay on a platform with no long-running process (a serverless
// function): each verified delivery runs one bounded drain
// (core.Relay.DrainWithin) within Budget and answers 200 with a JSON
// report of what it did:
//
//	{"status":"more","batches":3,"claimed":300,"published":300,"retried":0,
//	 "deadLettered":0,"released":0,"deferred":0,"settleFailed":0,"more":true,"durationMs":14210}
//
// A run that stops at its budget, or is cut off in a batch, loses nothing:
// published events are settled, unpublished ones released, and a batch
// whose settle did not finish is published again when its lease expires.
// The schedule's next run goes on from there, and so does any relay that
// shares the table. A run whose store failed answers 500 with
// {"status":"failed"}, so that QStash logs, retries and finally
// dead-letters it, where operators look. Requests that do not verify are
// refused as a Receiver refuses them (401, 405, 413), and do nothing.
//
// Create the schedule with the handler's URL as destination, e.g. every
// minute: POST /v2/schedules/https://relay.example.com/drain with
// Upstash-Cron: * * * * *. Runs that overlap (a retry, a slow run) are
// safe: relays sharing a table never take each other's events.
type DrainHandler struct {
	auth     authenticator
	relay    *core.Relay
	budget   time.Duration
	claimFor time.Duration
	log      *slog.Logger
	refusals refusalLimiter
	clock    core.Clock
	onRun    func(context.Context, DrainRun)
}

var _ http.Handler = (*DrainHandler)(nil)

// NewDrainHandler validates cfg and returns a DrainHandler. The error,
// matching core.ErrInvalidConfig, names the field to fix.
func NewDrainHandler(cfg *DrainHandlerConfig) (*DrainHandler, error) {
	if cfg == nil {
		return nil, &core.ConfigError{Field: "DrainHandlerConfig", Reason: "is nil: pass the signing keys, URL and Relay"}
	}
	v, err := NewVerifier(&VerifierConfig{CurrentSigningKey: cfg.CurrentSigningKey, NextSigningKey: cfg.NextSigningKey,
		Regions: cfg.Regions, Leeway: cfg.Leeway, Clock: cfg.Clock})
	if err != nil {
		return nil, err
	}
	bad := func(field, reason string) error { return &core.ConfigError{Field: field, Reason: reason} }
	switch {
	case cfg.URL == "":
		return nil, bad("URL", "is empty: set the handler's public URL exactly as the schedule's destination names it")
	case cfg.Relay == nil:
		return nil, bad("Relay", "is nil: pass the core.Relay to drain (core.NewRelay(store, publisher, cfg))")
	case cfg.Budget < 0:
		return nil, bad("Budget", "is negative: leave it 0 for the 25s default")
	case cfg.MaxBodyBytes < 0:
		return nil, bad("MaxBodyBytes", "is negative: leave it 0 for the 64 KiB default")
	}
	if err := validateURL(cfg.URL); err != nil {
		return nil, bad("URL", err.Error())
	}
	h := &DrainHandler{relay: cfg.Relay, budget: cfg.Budget, log: logs.OrDefault(cfg.Logger), clock: cfg.Clock, onRun: cfg.OnRun}
	if h.budget == 0 {
		h.budget = DefaultDrainBudget
	}
	publish := cfg.Relay.Config().PublishTimeout
	if h.budget <= publish {
		return nil, bad("Budget", fmt.Sprintf("is %s, which leaves no time to claim: it must exceed the relay's PublishTimeout (%s), by a second or more for the settle; shorten RelayConfig.PublishTimeout or raise Budget", h.budget, publish))
	}
	left := h.budget - publish
	h.claimFor = left - min(drainSettleReserve, left/2)
	if h.clock == nil {
		h.clock = core.SystemClock{}
	}
	maxBody := cfg.MaxBodyBytes
	if maxBody == 0 {
		maxBody = 64 << 10
	}
	guard := cfg.ReplayGuard
	if guard == nil {
		guard = NewMemoryReplayGuard(&MemoryReplayGuardConfig{Clock: h.clock})
	}
	h.auth = authenticator{verifier: v, url: cfg.URL, maxBody: maxBody, guard: guard}
	return h, nil
}

// drainAnswer is the JSON body of a run's answer.
type drainAnswer struct {
	Status string `json:"status"`
	core.DrainReport
	DurationMS int64 `json:"durationMs"`
}

// ServeHTTP verifies the delivery and runs one bounded drain.
func (h *DrainHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := context.WithDeadline(r.Context(), start.Add(h.budget))
	defer cancel()
	d := deliveryFromHeader(r.Header)
	if _, _, ref := h.auth.authenticate(ctx, w, r); ref != nil {
		h.logRefusal(ctx, d, ref, r.RemoteAddr)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(ref.status)
		_, _ = w.Write([]byte(`{"error":"` + ref.outcome.String() + `"}` + "\n"))
		return
	}

	rep, err := h.relay.DrainWithin(ctx, start.Add(h.claimFor))
	run := DrainRun{Delivery: d, Report: rep, Err: err, Duration: time.Since(start)}
	status := http.StatusOK
	switch {
	case err == nil && rep.More:
		run.Status = "more"
	case err == nil:
		run.Status = "drained"
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && r.Context().Err() == nil:
		// Our own budget cut the run: nothing is lost, the next run goes
		// on. Not a failure to retry.
		run.Status = "cut"
	default:
		run.Status, status = "failed", http.StatusInternalServerError
	}
	level := slog.LevelDebug
	if run.Status == "failed" || run.Status == "cut" {
		level = slog.LevelWarn
	}
	if h.log.Enabled(ctx, level) {
		attrs := []slog.Attr{slog.String("status", run.Status), slog.Int("claimed", rep.Claimed),
			slog.Int("published", rep.Published), slog.Int("released", rep.Released),
			slog.Duration("took", run.Duration), slog.String("message_id", truncate(d.MessageID))}
		if err != nil {
			attrs = append(attrs, slog.Any("error", err))
		}
		h.log.LogAttrs(ctx, level, "qstash: scheduled drain", attrs...)
	}
	if h.onRun != nil {
		h.onRun(ctx, run)
	}
	body, _ := json.Marshal(drainAnswer{Status: run.Status, DrainReport: rep, DurationMS: run.Duration.Milliseconds()})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func (h *DrainHandler) logRefusal(ctx context.Context, d Delivery, ref *refusal, remote string) {
	level := slog.LevelWarn
	if !h.log.Enabled(ctx, level) {
		return
	}
	ok, suppressed := h.refusals.allow(h.clock.Now())
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("outcome", ref.outcome.String()), slog.Int("status", ref.status),
		slog.String("message_id", truncate(d.MessageID)), slog.String("remote_addr", remote), slog.Any("error", ref.err)}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	h.log.LogAttrs(ctx, level, "qstash: scheduled drain refused", attrs...)
}
