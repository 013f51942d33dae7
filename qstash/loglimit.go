package qstash

import (
	"sync"
	"time"
)

// Refused requests may come from anyone who finds the endpoint, so a
// line per request would let a flood of forged POSTs fill the logs (and
// bury the line that matters). The Receiver writes at most refusalBurst
// lines per refusalWindow for them; the first line of the next window
// counts what was left out. Failures of authenticated deliveries (handler
// errors, panics) are not limited: QStash's retries bound them.
const (
	refusalBurst  = 10
	refusalWindow = 10 * time.Second
)

// refusalLimiter decides which refusals are logged.
type refusalLimiter struct {
	mu         sync.Mutex
	windowEnd  time.Time
	left       int
	suppressed int
}

// allow reports whether a refusal at now is logged and, when it opens a new
// window, how many were suppressed in the previous ones.
func (l *refusalLimiter) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !now.Before(l.windowEnd) {
		l.windowEnd = now.Add(refusalWindow)
		l.left = refusalBurst - 1
		suppressed, l.suppressed = l.suppressed, 0
		return true, suppressed
	}
	if l.left > 0 {
		l.left--
		return true, 0
	}
	l.suppressed++
	return false, 0
}
