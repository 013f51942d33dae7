package coretest

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// StoreOptions configures the store a StoreFactory returns.
type StoreOptions struct {
	// Ordering asks for per-aggregate ordering (only requested when
	// StoreFeatures.Ordering is set).
	Ordering bool
}

// WriteFunc writes events to the store under test, committed when it returns
// (the store's typed write side: postgres.Store.Add in its own transaction,
// memory.Store.Add).
type WriteFunc func(ctx context.Context, events ...core.Event) error

// StoreFactory returns a new, empty store and its write side. Each call must
// return an isolated store (a fresh table, schema or instance).
type StoreFactory func(t *testing.T, opts StoreOptions) (core.Store, WriteFunc)

// StoreFeatures declares the optional capabilities a store supports; the
// suite runs the matching cases and checks the store implements the matching
// interfaces.
type StoreFeatures struct {
	Ordering bool // per-aggregate head-of-line ordering
	Notifier bool // core.Notifier
	Stats    bool // core.StatsReader
	Replay   bool // core.Replayer
	Prune    bool // core.Pruner
	// DestinationFilter: Claim honours ClaimRequest.Destination.
	DestinationFilter bool
}

// DeduperFactory returns a new, empty deduper.
type DeduperFactory func(t *testing.T) core.Deduper

// PublisherHarness is what TestPublisher needs.
type PublisherHarness struct {
	// New returns a publisher and a function that reports every event its
	// transport has received so far (a test server's log, say). Delivery may
	// be asynchronous: the suite waits for what it expects.
	New func(t *testing.T) (pub core.Publisher, received func() []core.Event)
	// Timeout bounds each wait for deliveries. Defaults to 10s.
	Timeout time.Duration
}

// waitUntil polls cond until it holds or the deadline passes. Polling a
// condition with a deadline, not sleeping a fixed time, is how these suites
// wait for asynchronous work.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// newEvent returns a valid event of type typ created at t.
func newEvent(typ string, at time.Time) core.Event {
	return core.Event{
		ID: core.NewIDAt(at), Type: typ, SchemaVersion: 1, Payload: []byte(`{"n":1}`),
		CreatedAt: at, Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
}

// t0 is the suites' fixed start time. It lies in the future of any real
// clock, so an event a store stamps with its own now() (a database default,
// say) is already due at the suite's times: every due-ness decision is made
// against the requests' Now.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
