package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

func TestMisconfiguredMarks(t *testing.T) {
	base := errors.New("404 unknown queue")
	if core.Misconfigured(nil) != nil {
		t.Fatal("Misconfigured(nil) is not nil")
	}
	m := core.Misconfigured(base)
	if !core.IsMisconfigured(m) || !errors.Is(m, base) || m.Error() != base.Error() {
		t.Fatalf("Misconfigured(%v) = %v: IsMisconfigured %v, wraps %v", base, m, core.IsMisconfigured(m), errors.Is(m, base))
	}
	if !core.IsMisconfigured(fmt.Errorf("batch: %w", m)) {
		t.Fatal("a wrapped mark is not seen")
	}
	if core.IsMisconfigured(base) || core.IsMisconfigured(nil) {
		t.Fatal("an unmarked error counts as misconfigured")
	}
	if core.IsMisconfigured(core.Permanent(m)) {
		t.Fatal("Permanent must win over Misconfigured")
	}
}

// TestRelayDefersMisconfiguredEvents: a publish refused because of
// configuration (a wrong destination, say) keeps the event pending however
// many times it fails, with a backoff that grows while it lasts, and the
// event is delivered once the configuration is fixed, its attempts
// untouched. Before, such failures counted as attempts, so a misconfiguration
// left for minutes dead-lettered the whole outbox.
func TestRelayDefersMisconfiguredEvents(t *testing.T) {
	var logs syncBuffer
	f := newRelayFixture(t, nil, nil, core.RelayConfig{
		Concurrency: 1, PollInterval: time.Second, Logger: textLogger(&logs),
		Retry: core.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: 8 * time.Second, DisableJitter: true},
	})
	const failures = 6 // three times MaxAttempts
	var mu sync.Mutex
	var tries []time.Time
	f.pub.FailWith(func(core.Event) error {
		mu.Lock()
		defer mu.Unlock()
		tries = append(tries, f.clock.Now())
		if len(tries) <= failures {
			return core.Misconfigured(errors.New("404: queue \"orders\" does not exist"))
		}
		return nil
	})
	events := f.add(1)
	f.run()
	for f.pub.Count() == 0 {
		f.idle(1)
		if f.clock.Now().Sub(start) > time.Hour {
			t.Fatalf("not delivered within an hour of fake time; %d tries", len(tries))
		}
		f.clock.Advance(time.Second)
	}
	waitPublished(t, f.pub, 1)
	if got := f.pub.Published()[0]; got.ID != events[0].ID || got.Attempts != 1 {
		t.Fatalf("published %s at attempt %d, want %s at attempt 1: deferred tries must not count", got.ID, got.Attempts, events[0].ID)
	}
	st, err := f.store.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLettered != 0 {
		t.Fatalf("%d events dead-lettered by a misconfiguration", st.DeadLettered)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tries) != failures+1 {
		t.Fatalf("%d tries, want %d", len(tries), failures+1)
	}
	// The backoff grows with the run of failures, up to MaxBackoff.
	for i := 2; i < len(tries); i++ {
		prev, gap := tries[i-1].Sub(tries[i-2]), tries[i].Sub(tries[i-1])
		if gap < prev {
			t.Errorf("gap %d (%v) shorter than gap %d (%v): the backoff must grow", i, gap, i-1, prev)
		}
	}
	if last := tries[len(tries)-1].Sub(tries[len(tries)-2]); last < 8*time.Second {
		t.Errorf("last gap %v, want the 8s MaxBackoff reached", last)
	}
	if n := len(logs.lines("because of configuration")); n != failures {
		t.Errorf("%d error lines about configuration, want one per failed batch (%d):\n%s", n, failures, logs.String())
	}
	if n := len(logs.lines("level=ERROR")); n < failures {
		t.Errorf("misconfiguration logged below error level:\n%s", logs.String())
	}
}
