package core

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxkit/outboxkit/internal/logs"
)

// RelayConfig configures a Relay. The zero value is usable: every field says
// its default.
type RelayConfig struct {
	// BatchSize is the most events claimed (and published) at once. Defaults
	// to 100.
	BatchSize int
	// Concurrency is the number of batches in flight at once. Defaults to 2.
	Concurrency int
	// LeaseDuration is how long a claim keeps other relays off its events. It
	// must exceed PublishTimeout, so a lease never expires while its publish
	// is still running. Defaults to 30s.
	LeaseDuration time.Duration
	// PublishTimeout bounds one Publish call. Defaults to 10s.
	PublishTimeout time.Duration
	// PollInterval is the longest an idle relay waits before looking for
	// due events again when no wake-up arrives. It also bounds how late a
	// retry or a missed notification is picked up. Defaults to 1s.
	PollInterval time.Duration
	// MinPollInterval is how soon the relay looks again while its polls
	// keep finding events that no wake-up announced (writers that do not
	// notify, a store without a Notifier): fast while events flow, it then
	// backs off as the relay stays idle, waiting an eighth of the time
	// since its polls last found such events, up to PollInterval. The
	// interval is the relay's, shared by its Concurrency workers. Defaults
	// to 1ms (or PollInterval if that is shorter); set it to PollInterval
	// to poll at a fixed rate.
	MinPollInterval time.Duration
	// ShutdownTimeout is how long Run, once its context is done, lets
	// in-flight publishes finish before cancelling them and releasing their
	// events. Defaults to 10s; a negative value cancels them at once. It
	// bounds publishes only: claims, settles and releases in flight are let
	// finish (each within LeaseDuration), so that every batch a claim leased
	// is settled or released rather than left leased for a whole lease.
	ShutdownTimeout time.Duration
	// Destination, when set, dedicates the relay to events with this
	// Destination (see ClaimRequest.Destination). Defaults to all events.
	Destination string
	// Retry is the retry and dead-letter policy. See RetryPolicy for defaults.
	Retry RetryPolicy
	// Middleware wraps the publisher; the first is the outermost.
	Middleware []PublisherMiddleware
	// Hooks are told what happened to every settled batch (metrics, say).
	Hooks []RelayHook
	// DisableNotifier ignores the store's Notifier (if it has one) and relies
	// on polling alone.
	DisableNotifier bool
	// Logger receives the relay's logs: one line per failed batch, failed
	// claims and settles, and the end of a run of failed claims. Defaults to
	// slog.Default()'s handler filtered to warnings and errors, so a relay
	// that cannot work is never silent.
	Logger *slog.Logger
	// Clock is the relay's time source. Defaults to SystemClock. With any
	// other clock the relay passes its time to the store (ClaimRequest.Now).
	Clock Clock
}

// DefaultMinPollInterval is RelayConfig.MinPollInterval's default.
const DefaultMinPollInterval = time.Millisecond

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c RelayConfig) WithDefaults() RelayConfig {
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
	if c.Concurrency == 0 {
		c.Concurrency = 2
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
		if c.PublishTimeout >= c.LeaseDuration {
			c.PublishTimeout = c.LeaseDuration / 2
		}
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.MinPollInterval == 0 {
		c.MinPollInterval = min(DefaultMinPollInterval, c.PollInterval)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	c.Retry = c.Retry.WithDefaults()
	c.Logger = logs.OrDefault(c.Logger)
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	return c
}

func (c RelayConfig) validate() error {
	switch {
	case c.BatchSize < 1:
		return &ConfigError{Field: "BatchSize", Reason: "must be at least 1"}
	case c.Concurrency < 1:
		return &ConfigError{Field: "Concurrency", Reason: "must be at least 1"}
	case c.LeaseDuration <= 0:
		return &ConfigError{Field: "LeaseDuration", Reason: "must be positive"}
	case c.PublishTimeout <= 0:
		return &ConfigError{Field: "PublishTimeout", Reason: "must be positive"}
	case c.PublishTimeout >= c.LeaseDuration:
		return &ConfigError{Field: "PublishTimeout", Reason: "must be shorter than LeaseDuration (" + c.LeaseDuration.String() +
			"), or a lease could expire while its publish still runs and another relay would publish the same events: shorten PublishTimeout or lengthen LeaseDuration"}
	case c.PollInterval <= 0:
		return &ConfigError{Field: "PollInterval", Reason: "must be positive"}
	case c.MinPollInterval <= 0:
		return &ConfigError{Field: "MinPollInterval", Reason: "must be positive"}
	case c.MinPollInterval > c.PollInterval:
		return &ConfigError{Field: "MinPollInterval", Reason: "must not exceed PollInterval (" + c.PollInterval.String() + "): it is the fastest the relay polls, PollInterval the slowest"}
	}
	return c.Retry.validate()
}

// RelayHook observes a relay. Implementations must be quick and safe for
// concurrent use.
type RelayHook interface {
	// AfterSettle is called once per batch after Settle returned.
	AfterSettle(ctx context.Context, info SettleInfo)
}

// SettleInfo describes one settled batch.
type SettleInfo struct {
	// Events are the batch's events, aligned with Outcomes.
	Events   []Event
	Outcomes []Outcome
	// PublishDuration is how long Publish took.
	PublishDuration time.Duration
	// Err is Settle's error, if any (a *LeaseLostError, or a store failure
	// after which the events are redelivered when their lease expires).
	Err error
}
