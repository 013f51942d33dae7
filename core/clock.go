package core

import "time"

// Clock tells the time and makes timers. The relay takes every time it
// compares (backoff, poll intervals, timeouts) from its Clock, so tests can move
// a fake clock (coretest.FakeClock) instead of sleeping.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer a Clock hands out.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// SystemClock is the Clock of the operating system.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// isSystemClock reports whether c is the real clock, in which case stores use
// their own notion of now.
func isSystemClock(c Clock) bool {
	switch c.(type) {
	case SystemClock, *SystemClock:
		return true
	}
	return false
}
