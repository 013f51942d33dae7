package memory_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStoreConformance(t *testing.T) {
	coretest.TestStore(t, func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
		s := memory.NewStore(&memory.StoreConfig{Ordering: opts.Ordering})
		return s, s.Add
	}, coretest.StoreFeatures{Ordering: true, Notifier: true, Stats: true, Replay: true, Prune: true, DestinationFilter: true})
}

func TestDeduperConformance(t *testing.T) {
	coretest.TestDeduper(t, func(t *testing.T) core.Deduper { return memory.NewDeduper() })
}

func TestPublisherConformance(t *testing.T) {
	coretest.TestPublisher(t, coretest.PublisherHarness{New: func(t *testing.T) (core.Publisher, func() []core.Event) {
		p := memory.NewPublisher()
		return p, p.Published
	}})
}

func TestStoreRefusesOversizedPayload(t *testing.T) {
	s := memory.NewStore(&memory.StoreConfig{MaxPayloadBytes: 16})
	ok, _ := core.NewEvent("small", map[string]int{"a": 1})
	big, _ := core.NewEvent("big", map[string]string{"a": "0123456789abcdef"})
	err := s.Add(context.Background(), ok, big)
	if err == nil {
		t.Fatal("oversized payload accepted")
	}
	if _, found := s.Get(ok.ID); found {
		t.Fatal("valid event of a refused batch was written")
	}
}

func TestFaults(t *testing.T) {
	coretest.TestFaults(t, func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
		s := memory.NewStore(&memory.StoreConfig{Ordering: opts.Ordering})
		return s, s.Add
	}, coretest.FaultOptions{})
}
