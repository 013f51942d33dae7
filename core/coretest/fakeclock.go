package coretest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// FakeClock is a core.Clock that moves only when told to. Timers fire when
// Advance or Set moves the clock past their deadline. It is safe for
// concurrent use.
//
// Tests that run a relay in a goroutine use WaitForTimers to learn that the
// relay is idle (waiting on its poll timer) before advancing, instead of
// sleeping.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

// NewFakeClock returns a clock stopped at start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, changed: make(chan struct{})}
}

var _ core.Clock = (*FakeClock)(nil)

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock reaches now+d. A timer
// with d <= 0 fires at once.
func (c *FakeClock) NewTimer(d time.Duration) core.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, when: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.signalLocked()
	return t
}

// Advance moves the clock forward by d and fires the timers that are due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.now.Add(d))
}

// Set moves the clock to t (which must not be before Now) and fires the
// timers that are due.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		panic("coretest: FakeClock.Set cannot move the clock backwards")
	}
	c.setLocked(t)
}

func (c *FakeClock) setLocked(t time.Time) {
	c.now = t
	sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].when.Before(c.timers[j].when) })
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.when.After(t) {
			tm.ch <- t
			continue
		}
		kept = append(kept, tm)
	}
	for i := len(kept); i < len(c.timers); i++ {
		c.timers[i] = nil
	}
	c.timers = kept
	c.signalLocked()
}

// Timers returns the number of timers waiting to fire.
func (c *FakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers blocks until at least n timers are waiting, or ctx is done.
func (c *FakeClock) WaitForTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		waiting, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if waiting >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitForDeadline blocks until a timer is waiting to fire exactly at when,
// or ctx is done. It lets a test learn that code under test armed the timer it
// expects (a retry's delay, say) before advancing past it.
func (c *FakeClock) WaitForDeadline(ctx context.Context, when time.Time) error {
	for {
		c.mu.Lock()
		found, changed := false, c.changed
		for _, t := range c.timers {
			found = found || t.when.Equal(when)
		}
		c.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *FakeClock) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type fakeTimer struct {
	clock *FakeClock
	when  time.Time
	ch    chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, tm := range c.timers {
		if tm == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.signalLocked()
			return true
		}
	}
	return false
}
