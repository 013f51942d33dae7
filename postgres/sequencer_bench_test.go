package postgres_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// BenchmarkSequencerBesideDeduper applies events with a no-op effect
// through Deduper.Once and Sequencer.OnceInOrder (each event the next of
// its aggregate, over 100 aggregates), so the sequencer's cost shows beside
// the plain Deduper's.
func BenchmarkSequencerBesideDeduper(b *testing.B) {
	db := newDB(b, 2)
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	b.Run("Deduper.Once", func(b *testing.B) {
		d, err := postgres.NewDeduper(db.pool, &postgres.DeduperConfig{Schema: db.schema})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := d.Once(ctx, core.DedupeKey{Consumer: "bench", EventID: core.NewID()}, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Sequencer.OnceInOrder", func(b *testing.B) {
		s, err := postgres.NewSequencer(db.pool, &postgres.SequencerConfig{Schema: db.schema})
		if err != nil {
			b.Fatal(err)
		}
		next := make([]int64, 100)
		i := 0
		for b.Loop() {
			a := i % len(next)
			next[a]++
			e := core.Event{ID: core.NewID(), Type: "bench", AggregateType: "bench", AggregateID: strconv.Itoa(a), Sequence: next[a]}
			applied, err := s.OnceInOrder(ctx, "bench", e, noop)
			if err != nil || !applied {
				b.Fatalf("OnceInOrder = %v, %v", applied, err)
			}
			i++
		}
	})
}
