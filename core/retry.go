package core

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides when a failed event is tried again and when it is
// dead-lettered. The delay before attempt n+1 is
// InitialBackoff × Multiplier^(n-1), capped at MaxBackoff, then spread by
// ±Jitter so relays that failed together do not retry together.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts after which a failing event is
	// dead-lettered. Defaults to 10.
	MaxAttempts int
	// InitialBackoff is the delay after the first failed attempt. Defaults to
	// 1s.
	InitialBackoff time.Duration
	// MaxBackoff caps the delay. Defaults to 10m.
	MaxBackoff time.Duration
	// Multiplier grows the delay after each attempt. Defaults to 2.
	Multiplier float64
	// Jitter is the fraction, in [0, 1), by which a delay is randomly spread
	// either way. Defaults to 0.2; set DisableJitter for exact delays.
	Jitter float64
	// DisableJitter makes delays exact (tests, or transports that add their
	// own jitter).
	DisableJitter bool
}

// WithDefaults returns the policy with zero fields set to their defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 10
	}
	if p.InitialBackoff == 0 {
		p.InitialBackoff = time.Second
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = 10 * time.Minute
	}
	if p.Multiplier == 0 {
		p.Multiplier = 2
	}
	if p.Jitter == 0 && !p.DisableJitter {
		p.Jitter = 0.2
	}
	if p.DisableJitter {
		p.Jitter = 0
	}
	return p
}

func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 1:
		return &ConfigError{Field: "Retry.MaxAttempts", Reason: "must be at least 1"}
	case p.InitialBackoff < 0:
		return &ConfigError{Field: "Retry.InitialBackoff", Reason: "must not be negative"}
	case p.MaxBackoff < p.InitialBackoff:
		return &ConfigError{Field: "Retry.MaxBackoff", Reason: "must not be shorter than InitialBackoff"}
	case p.Multiplier < 1:
		return &ConfigError{Field: "Retry.Multiplier", Reason: "must be at least 1"}
	case p.Jitter < 0 || p.Jitter >= 1:
		return &ConfigError{Field: "Retry.Jitter", Reason: "must be in [0, 1)"}
	}
	return nil
}

// Backoff returns the delay after the given failed attempt (1 for the first),
// with jitter applied.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.InitialBackoff) * math.Pow(p.Multiplier, float64(attempt-1))
	if d > float64(p.MaxBackoff) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(p.MaxBackoff)
	}
	if p.Jitter > 0 {
		d *= 1 + p.Jitter*(2*rand.Float64()-1)
	}
	return time.Duration(d)
}

// Decide turns the error of one publish attempt into an outcome: published on
// nil, dead-lettered when the error is permanent or attempts reached
// MaxAttempts, otherwise a retry after Backoff (or the transport's RetryAfter
// hint, when longer).
func (p RetryPolicy) Decide(id ID, attempts int, err error) Outcome {
	if err == nil {
		return Outcome{ID: id, Kind: Published}
	}
	if IsPermanent(err) || attempts >= p.MaxAttempts {
		return Outcome{ID: id, Kind: DeadLettered, Error: err.Error()}
	}
	delay := p.Backoff(attempts)
	if hint, ok := RetryAfterHint(err); ok && hint > delay {
		delay = hint
	}
	return Outcome{ID: id, Kind: Retry, Error: err.Error(), Delay: delay}
}
