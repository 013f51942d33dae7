package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
)

// waitDeadline waits until the relay armed a timer firing exactly at when.
func (f *relayFixture) waitDeadline(when time.Time, what string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.clock.WaitForDeadline(ctx, when); err != nil {
		f.t.Fatalf("no timer at %v (+%v) for %s: %v", when, when.Sub(start), what, err)
	}
}

// Events that no wake-up announced (writers that do not notify) make the
// relay poll again after MinPollInterval, and the waits then grow with
// the idle time, an eighth of it, up to PollInterval.
func TestRelayPollsFastWhileUnannouncedEventsFlow(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{
		DisableNotifier: true, Concurrency: 1, PollInterval: time.Second, MinPollInterval: time.Millisecond,
	})
	f.run()
	// Nothing found yet: an idle relay waits the whole PollInterval.
	f.waitDeadline(start.Add(time.Second), "the idle poll")
	f.add(3)
	f.clock.Advance(time.Second)
	waitPublished(t, f.pub, 3)
	found := start.Add(time.Second)
	f.waitDeadline(found.Add(time.Millisecond), "the fast poll after a find")

	f.clock.Advance(time.Millisecond) // an empty poll 1 ms after the find: still the minimum
	f.waitDeadline(found.Add(2*time.Millisecond), "the second fast poll")
	// The clock moves at once, and the timer fires: the next wait is
	// computed at the new time.
	f.clock.Advance(79 * time.Millisecond) // 80 ms idle: wait 10 ms
	f.waitDeadline(found.Add(90*time.Millisecond), "the poll after 80 ms idle")
	f.clock.Advance(10 * time.Second) // long idle: back to PollInterval
	f.waitDeadline(found.Add(80*time.Millisecond+11*time.Second), "the idle poll after backing off")

	// New events are found by that poll, and polling speeds up again.
	f.add(2)
	f.clock.Advance(time.Second)
	waitPublished(t, f.pub, 5)
	f.waitDeadline(f.clock.Now().Add(time.Millisecond), "the fast poll after the second find")
}

// The relay's interval is shared by its workers: each waits Concurrency
// times it, so that two workers together still poll about once a
// millisecond rather than twice.
func TestRelayFastPollIsPerRelay(t *testing.T) {
	f := newRelayFixture(t, nil, nil, core.RelayConfig{
		DisableNotifier: true, Concurrency: 2, PollInterval: time.Second, MinPollInterval: time.Millisecond,
	})
	f.run()
	f.idle(2)
	f.add(1)
	f.clock.Advance(time.Second)
	waitPublished(t, f.pub, 1)
	f.waitDeadline(f.clock.Now().Add(2*time.Millisecond), "a worker's fast poll")
}

// Events the store announced do not speed polling up: the wake-ups bring
// the relay already, and fast polls beside them would double the claims.
// They get one more look, in case the announcements stop while events
// flow, then the idle poll.
func TestRelayAnnouncedEventsKeepTheIdlePoll(t *testing.T) {
	// The wake-up is sent by hand once the relay listens: the memory
	// store's own would be lost if it came before the relay's Listen
	// registered (seen with GOMAXPROCS=1), and the events would wait for
	// the idle poll.
	f, store := newWakeFixture(t, core.RelayConfig{Concurrency: 1, PollInterval: time.Second})
	f.run()
	f.idle(1)
	f.add(3)
	store.send(t)
	waitPublished(t, f.pub, 3)
	f.waitDeadline(start.Add(time.Millisecond), "the one look after announced events")
	f.clock.Advance(time.Millisecond)
	f.waitDeadline(start.Add(time.Millisecond+time.Second), "the idle poll after it")
	if n := f.clock.Timers(); n != 1 {
		t.Fatalf("%d timers armed, want the worker's one idle poll", n)
	}
}

// wakeStore is a memory store whose wake-ups the test sends by hand, and
// which counts claims.
type wakeStore struct {
	*memory.Store
	mu     sync.Mutex
	wake   func()
	claims atomic.Int64
}

func (s *wakeStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, req)
}

func (s *wakeStore) Listen(ctx context.Context, wake func()) error {
	s.mu.Lock()
	s.wake = wake
	s.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

func (s *wakeStore) send(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		w := s.wake
		s.mu.Unlock()
		if w != nil {
			w()
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay never called Listen")
		}
		time.Sleep(time.Millisecond)
	}
}

// newWakeFixture is a relay fixture whose relay runs over a wakeStore
// wrapping the fixture's store, so the test sends wake-ups by hand.
func newWakeFixture(t *testing.T, cfg core.RelayConfig) (*relayFixture, *wakeStore) {
	t.Helper()
	f := newRelayFixture(t, nil, nil, cfg)
	store := &wakeStore{Store: f.store}
	cfg.Clock = f.clock
	r, err := core.NewRelay(store, f.pub, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.relay = r
	return f, store
}

// A wake-up that finds nothing may have overtaken the commit it announced
// (a replication stream can report a commit a moment before it is
// visible): the worker looks again at once, once more after
// MinPollInterval, then goes back to its idle poll.
func TestRelayLooksAgainAfterAnEmptyWakeUp(t *testing.T) {
	f, store := newWakeFixture(t, core.RelayConfig{Concurrency: 1, PollInterval: time.Second, MinPollInterval: time.Millisecond})
	f.run()
	f.waitDeadline(start.Add(time.Second), "the idle poll")
	before := store.claims.Load()
	store.send(t)
	f.waitDeadline(start.Add(time.Millisecond), "the third look after an empty wake-up")
	if got := store.claims.Load() - before; got != 2 {
		t.Fatalf("%d claims after an empty wake-up before the timed look, want 2 (the wake-up's and one at once)", got)
	}
	f.clock.Advance(time.Millisecond)
	f.waitDeadline(start.Add(time.Millisecond+time.Second), "the idle poll after the third look")
	if got := store.claims.Load() - before; got != 3 {
		t.Fatalf("%d claims in all, want 3", got)
	}
}

func TestMinPollIntervalValidation(t *testing.T) {
	store := memory.NewStore(nil)
	pub := memory.NewPublisher()
	for _, cfg := range []core.RelayConfig{
		{MinPollInterval: -time.Millisecond},
		{PollInterval: 10 * time.Millisecond, MinPollInterval: 20 * time.Millisecond},
	} {
		_, err := core.NewRelay(store, pub, &cfg)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Field != "MinPollInterval" {
			t.Errorf("NewRelay(%+v) = %v, want a ConfigError for MinPollInterval", cfg, err)
		}
	}
	r, err := core.NewRelay(store, pub, &core.RelayConfig{PollInterval: 500 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Config().MinPollInterval; got != 500*time.Microsecond {
		t.Errorf("MinPollInterval defaults to %v under a 500µs PollInterval, want PollInterval", got)
	}
	if got := (core.RelayConfig{}).WithDefaults().MinPollInterval; got != core.DefaultMinPollInterval {
		t.Errorf("MinPollInterval defaults to %v, want %v", got, core.DefaultMinPollInterval)
	}
}

// While events flow at paceFrom (1,500 events/s) or more, claims are
// spaced by the rate they are found at (a microsecond per event per
// second): a wake-up soon after a claim round that found events waits out
// the rest, and its claim takes what arrived meanwhile. Below that rate a
// wake-up is claimed at once.
func TestRelayPacesClaimsWhileEventsFlow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		perRound int
		pace     time.Duration
	}{
		// Two rounds 1 ms apart find 10 events each: 10,000/s, smoothed to
		// a quarter of it after one step: 2,500/s, claims 2.5 ms apart.
		{"fast", 10, 2500 * time.Microsecond},
		// 1 event each: 1,000/s, smoothed to 250/s: not paced.
		{"slow", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, store := newWakeFixture(t, core.RelayConfig{Concurrency: 1, PollInterval: time.Second})
			f.run()
			f.waitDeadline(start.Add(time.Second), "the idle poll")

			f.add(tc.perRound)
			store.send(t)
			waitPublished(t, f.pub, tc.perRound)
			f.waitDeadline(start.Add(time.Millisecond), "the look after the first round")
			f.clock.Advance(time.Millisecond) // that look finds nothing
			second := start.Add(time.Millisecond)
			f.waitDeadline(second.Add(time.Second), "the idle poll after it")
			f.add(tc.perRound)
			store.send(t)
			waitPublished(t, f.pub, 2*tc.perRound)
			f.waitDeadline(second.Add(time.Millisecond), "the look after the second round")

			before := store.claims.Load()
			f.add(1)
			store.send(t)
			if tc.pace == 0 {
				waitPublished(t, f.pub, 2*tc.perRound+1) // at once: the clock stands still
				return
			}
			f.waitDeadline(second.Add(tc.pace), "the paced claim")
			if got := store.claims.Load(); got != before {
				t.Fatalf("%d claims before the pacing interval ended", got-before)
			}
			f.clock.Advance(tc.pace)
			waitPublished(t, f.pub, 2*tc.perRound+1)
		})
	}
}
