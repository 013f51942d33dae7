package qstashdevtest

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core/coretest"
)

// FakeClock is coretest.FakeClock started at a whole second, so event
// times in milliseconds compare exactly.
type FakeClock struct{ *coretest.FakeClock }

// NewFakeClock returns a FakeClock at the current time, truncated to the
// second.
func NewFakeClock() FakeClock {
	return FakeClock{coretest.NewFakeClock(time.Now().Truncate(time.Second))}
}

// WaitTimer blocks until a timer is armed for exactly when: the server's
// scheduler keeps at most one, and advancing before it is armed would race.
func (c FakeClock) WaitTimer(t testing.TB, when time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := c.WaitForDeadline(ctx, when); err != nil {
		t.Fatalf("no timer armed for %v (now %v)", when, c.Now())
	}
}
