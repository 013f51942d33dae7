package databasesql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	// The two drivers teams use with database/sql.
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// drivers are the database/sql drivers every suite runs through, by the
// name each registers.
var drivers = []string{"postgres" /* lib/pq */, "pgx" /* pgx's stdlib */}

// driverLabel names a driver in test names.
func driverLabel(name string) string {
	if name == "postgres" {
		return "libpq"
	}
	return "pgxstdlib"
}

// openDB opens a *sql.DB on the test database with driver, closed when t
// ends.
func openDB(t testing.TB, driver string, maxConns int) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, pgtest.URL())
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL at %s is unreachable through %s (%v): start it (CI's .ci/run does) or set DATABASE_URL", pgtest.URL(), driver, err)
	}
	return db
}

// migrated returns a fresh schema migrated through db (database/sql), and
// dropped when t ends.
func migrated(t testing.TB, db *sql.DB) string {
	t.Helper()
	schema := pgtest.Schema(t, pgtest.Pool(t, 2), "sqldb")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, db, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate through database/sql: %v", err)
	}
	return schema
}

// addTx writes events in a database/sql transaction of their own, as a
// service on database/sql would.
func addTx(ctx context.Context, s *postgres.Store, db *sql.DB, events ...core.Event) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if err := s.Add(ctx, postgres.SQL(tx), events...); err != nil {
		return err
	}
	return tx.Commit()
}

// storeFactory returns stores on a *sql.DB of driver (claims and
// settlements through database/sql) whose events are written through
// *sql.Tx. Their wake-ups come from WakeupURL's connection: database/sql
// has no LISTEN.
func storeFactory(t *testing.T, driver string, base postgres.Config) coretest.StoreFactory {
	db := openDB(t, driver, 8)
	return func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
		cfg := base
		cfg.Schema = migrated(t, db)
		cfg.Ordering = opts.Ordering
		cfg.WakeupURL = pgtest.URL()
		s, err := postgres.New(db, &cfg)
		if err != nil {
			t.Fatalf("new store on *sql.DB: %v", err)
		}
		return s, func(ctx context.Context, events ...core.Event) error { return addTx(ctx, s, db, events...) }
	}
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			coretest.TestStore(t, storeFactory(t, d, postgres.Config{}), coretest.StoreFeatures{
				Ordering: true, Notifier: true, Stats: true, Replay: true, Prune: true, DestinationFilter: true,
			})
		})
	}
}

func TestStoreConformanceDeletePublished(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			coretest.TestStore(t, storeFactory(t, d, postgres.Config{DeletePublished: true}), coretest.StoreFeatures{
				Ordering: true, Notifier: true, Stats: true, DestinationFilter: true,
			})
		})
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			coretest.TestFaults(t, storeFactory(t, d, postgres.Config{}), coretest.FaultOptions{})
		})
	}
}

func TestDeduperConformance(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			db := openDB(t, d, 8)
			coretest.TestDeduper(t, func(t *testing.T) core.Deduper {
				dd, err := postgres.NewDeduper(db, &postgres.DeduperConfig{Schema: migrated(t, db)})
				if err != nil {
					t.Fatal(err)
				}
				return dd
			})
		})
	}
}

func TestSequencerConformance(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			db := openDB(t, d, 8)
			coretest.TestSequencedDeduper(t, func(t *testing.T) core.SequencedDeduper {
				s, err := postgres.NewSequencer(db, &postgres.SequencerConfig{Schema: migrated(t, db)})
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}
