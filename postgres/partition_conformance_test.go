package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// The conformance suites on the partitioned layout. The suites write
// events created around 2030-01-01 12:00 UTC (coretest's t0), and some
// created by the database's now(): each schema gets partitions for the
// suites' period too, so that their rows land in partitions of their own
// (not the default one) and a batch can span several.

// suiteT0 is coretest's t0.
var suiteT0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// partitionedSchema returns a fresh schema migrated with the layout, with
// partitions covering five hours around suiteT0 (five periods, for
// periods of minutes) besides those of now.
func partitionedSchema(t testing.TB, pool *pgxpool.Pool, layout postgres.Partitioning) string {
	t.Helper()
	schema := pgtest.Schema(t, pool, "pgpart")
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schema, Partitions: layout}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	p, err := postgres.NewPartitions(pool, &postgres.PartitionsConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	from, to := suiteT0.Add(-2*time.Hour), suiteT0.Add(3*time.Hour)
	if layout != postgres.PartitionDaily && layout != postgres.PartitionHourly {
		// Periods of minutes: as many as hourly's five, the suites' rows
		// being seconds from suiteT0.
		from, to = suiteT0.Add(-10*time.Minute), suiteT0.Add(15*time.Minute)
	}
	if _, err := p.Create(ctxT(t), from, to); err != nil {
		t.Fatalf("create the suites' partitions: %v", err)
	}
	return schema
}

func partitionedFactory(t *testing.T, maxConns int32, base postgres.Config, layout postgres.Partitioning, grown bool) coretest.StoreFactory {
	pool := pgtest.Pool(t, maxConns)
	return func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
		db := testDB{pool: pool, schema: partitionedSchema(t, pool, layout)}
		cfg := base
		cfg.Ordering = opts.Ordering
		s := newStore(t, db, cfg)
		if grown {
			// Prepared from the first call: the suites' partitions
			// hold a few rows, far from the statistics that end the
			// partitioned layout's planning per execution.
			s.SetGrownForTest()
			s.SetPlannedRowsForTest(0)
			if _, err := pool.Exec(ctxT(t), "ANALYZE "+pgx.Identifier{db.schema, "outbox_events"}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
		return s, func(ctx context.Context, events ...core.Event) error {
			return addTx(ctx, s, pool, events...)
		}
	}
}

var allStoreFeatures = coretest.StoreFeatures{
	Ordering: true, Notifier: true, Stats: true, Replay: true, Prune: true, DestinationFilter: true,
}

func TestStoreConformancePartitioned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		layout postgres.Partitioning
		grown  bool
	}{
		// Young (statements planned per execution) and grown (prepared,
		// settlements pipelined with the next claim), one period each.
		{"daily", postgres.PartitionDaily, false},
		{"hourly-grown", postgres.PartitionHourly, true},
		{"5m", postgres.PartitionMinutes(5), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			coretest.TestStore(t, partitionedFactory(t, 6, postgres.Config{}, c.layout, c.grown), allStoreFeatures)
		})
	}
}

func TestStoreConformancePartitionedDeletePublished(t *testing.T) {
	t.Parallel()
	coretest.TestStore(t, partitionedFactory(t, 6, postgres.Config{DeletePublished: true}, postgres.PartitionHourly, true), coretest.StoreFeatures{
		Ordering: true, Notifier: true, Stats: true, DestinationFilter: true,
	})
}

func TestFaultsPartitioned(t *testing.T) {
	t.Parallel()
	coretest.TestFaults(t, partitionedFactory(t, 4, postgres.Config{}, postgres.PartitionDaily, true), coretest.FaultOptions{})
}

func TestDeduperConformancePartitioned(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 8)
	coretest.TestDeduper(t, func(t *testing.T) core.Deduper {
		d, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: partitionedSchema(t, pool, postgres.PartitionHourly)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
