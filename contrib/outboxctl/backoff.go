package main

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is a capped exponential delay with ±20% jitter, so tenants and
// replicas that failed together do not retry in step.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

// next returns the delay before the next attempt and doubles it.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(b.cur))
	return b.cur + jitter
}

// reset starts over from min.
func (b *backoff) reset() { b.cur = 0 }

// sleepCtx waits d or until ctx ends, and reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
