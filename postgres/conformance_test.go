package postgres_test

import (
	"context"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// storeFactory gives every call a fresh migrated schema on one shared pool,
// and writes each batch in its own transaction as a service would.
//
// The suites' tables stay small, so their stores run as on a young table
// (plans.go); the "Grown" variants run the same suites with the statements
// prepared and each settlement pipelined with the next claim, as on a table
// with history.
func storeFactory(t *testing.T, maxConns int32, base postgres.Config) coretest.StoreFactory {
	return storeFactoryGrown(t, maxConns, base, false)
}

func storeFactoryGrown(t *testing.T, maxConns int32, base postgres.Config, grown bool) coretest.StoreFactory {
	pool := pgtest.Pool(t, maxConns)
	return func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
		db := testDB{pool: pool, schema: migratedSchema(t, pool)}
		cfg := base
		cfg.Ordering = opts.Ordering
		s := newStore(t, db, cfg)
		if grown {
			s.SetGrownForTest()
		}
		return s, func(ctx context.Context, events ...core.Event) error {
			return addTx(ctx, s, pool, events...)
		}
	}
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	coretest.TestStore(t, storeFactory(t, 8, postgres.Config{}), coretest.StoreFeatures{
		Ordering: true, Notifier: true, Stats: true, Replay: true, Prune: true, DestinationFilter: true,
	})
}

// With DeletePublished, published events are gone at once: nothing to
// replay or prune, everything else as usual.
func TestStoreConformanceDeletePublished(t *testing.T) {
	t.Parallel()
	coretest.TestStore(t, storeFactory(t, 8, postgres.Config{DeletePublished: true}), coretest.StoreFeatures{
		Ordering: true, Notifier: true, Stats: true, DestinationFilter: true,
	})
}

func TestStoreConformanceGrown(t *testing.T) {
	t.Parallel()
	coretest.TestStore(t, storeFactoryGrown(t, 8, postgres.Config{}, true), coretest.StoreFeatures{
		Ordering: true, Notifier: true, Stats: true, Replay: true, Prune: true, DestinationFilter: true,
	})
}

func TestStoreConformanceDeletePublishedGrown(t *testing.T) {
	t.Parallel()
	coretest.TestStore(t, storeFactoryGrown(t, 8, postgres.Config{DeletePublished: true}, true), coretest.StoreFeatures{
		Ordering: true, Notifier: true, Stats: true, DestinationFilter: true,
	})
}

func TestFaultsGrown(t *testing.T) {
	t.Parallel()
	coretest.TestFaults(t, storeFactoryGrown(t, 4, postgres.Config{}, true), coretest.FaultOptions{})
}

func TestFaults(t *testing.T) {
	t.Parallel()
	coretest.TestFaults(t, storeFactory(t, 4, postgres.Config{}), coretest.FaultOptions{})
}

func TestDeduperConformance(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 8)
	coretest.TestDeduper(t, func(t *testing.T) core.Deduper {
		d, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: migratedSchema(t, pool)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
