package coretest

import (
	"context"
	"testing"

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
}

// DeduperFactory returns a new, empty deduper.
type DeduperFactory func(t *testing.T) core.Deduper

// PublisherHarness is what TestPublisher needs.
type PublisherHarness struct {
	// New returns a publisher and a function that reports every event its
	// transport has received so far (a test server's log, say).
	New func(t *testing.T) (pub core.Publisher, received func() []core.Event)
}

// TestStore runs the Store conformance suite.
func TestStore(t *testing.T, newStore StoreFactory, features StoreFeatures) {}

// TestDeduper runs the Deduper conformance suite.
func TestDeduper(t *testing.T, newDeduper DeduperFactory) {}

// TestPublisher runs the Publisher conformance suite.
func TestPublisher(t *testing.T, h PublisherHarness) {}
