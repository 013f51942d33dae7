package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// TestClaimedLeaseAlwaysHasItsExpiry: core.Lease.Until is "when the lease
// expires ... in the store's clock". A batch that the top-up claim filled
// after the slot claim came back empty must carry it too.
func TestClaimedLeaseAlwaysHasItsExpiry(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	store := newStore(t, db, postgres.Config{})
	ctx := context.Background()
	events := make([]core.Event, 600)
	for i := range events {
		e, err := core.NewEvent("lease.until", map[string]int{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		events[i] = e
	}
	if err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error { return store.Add(ctx, tx, events...) }); err != nil {
		t.Fatal(err)
	}
	// Three claimers drain it together, as three relays would.
	var wg sync.WaitGroup
	var zero, batches atomic.Int64
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := store.Claim(ctx, core.ClaimRequest{Limit: 20, LeaseFor: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(b.Events) == 0 {
					return
				}
				batches.Add(1)
				if b.Lease.Until.IsZero() {
					zero.Add(1)
				}
				if err := store.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: allPublished(b)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if zero.Load() > 0 {
		t.Fatalf("%d of %d batches have a zero Lease.Until (topUp's mergeBatches keeps the lease of a slot claim that came back empty)", zero.Load(), batches.Load())
	}
}

func allPublished(b core.Batch) []core.Outcome {
	out := make([]core.Outcome, len(b.Events))
	for i, e := range b.Events {
		out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
	}
	return out
}
