package databasesql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// seedRetention writes n rows of each kind retention meets, tagged by
// event_type (keep.* must stay, drop.* must go), and processed records
// by consumer; ages fit the defaults (7 and 30 days).
func seedRetention(t *testing.T, db *sql.DB, schema string, n int) {
	t.Helper()
	ob := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	pr := pgx.Identifier{schema, "outbox_events_processed"}.Sanitize()
	for _, q := range []string{
		`INSERT INTO ` + ob + ` (event_type, payload, created_at, available_at) SELECT 'keep.pending', '{}', now() - interval '60 days', now() - interval '60 days' FROM generate_series(1, $1)`,
		`INSERT INTO ` + ob + ` (event_type, payload, created_at, lease_token, lease_until, attempts) SELECT 'keep.leased', '{}', now() - interval '60 days', gen_random_uuid(), now() + interval '1 hour', 1 FROM generate_series(1, $1)`,
		`INSERT INTO ` + ob + ` (event_type, payload, created_at, dead_at, attempts, last_error) SELECT 'keep.dead', '{}', now() - interval '61 days', now() - interval '60 days', 10, 'poison' FROM generate_series(1, $1)`,
		`INSERT INTO ` + ob + ` (event_type, payload, published_at) SELECT 'keep.young', '{}', now() - interval '6 days' FROM generate_series(1, $1)`,
		`INSERT INTO ` + ob + ` (event_type, payload, published_at) SELECT 'drop.old', '{}', now() - interval '8 days' FROM generate_series(1, $1)`,
		`INSERT INTO ` + pr + ` (consumer, event_id, processed_at) SELECT 'keep', gen_random_uuid(), now() - interval '1 day' FROM generate_series(1, $1)`,
		`INSERT INTO ` + pr + ` (consumer, event_id, processed_at) SELECT 'drop', gen_random_uuid(), now() - interval '40 days' FROM generate_series(1, $1)`,
	} {
		if _, err := db.ExecContext(context.Background(), q, n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// retained counts the rows to keep and the due rows left.
func retained(t *testing.T, db *sql.DB, schema string) (keep, due int) {
	t.Helper()
	err := db.QueryRowContext(context.Background(), `SELECT
	(SELECT count(*) FROM `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+` WHERE event_type LIKE 'keep.%') +
	(SELECT count(*) FROM `+pgx.Identifier{schema, "outbox_events_processed"}.Sanitize()+` WHERE consumer = 'keep'),
	(SELECT count(*) FROM `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+` WHERE event_type LIKE 'drop.%') +
	(SELECT count(*) FROM `+pgx.Identifier{schema, "outbox_events_processed"}.Sanitize()+` WHERE consumer = 'drop')`).Scan(&keep, &due)
	if err != nil {
		t.Fatal(err)
	}
	return keep, due
}

// Retention on *sql.DB through lib/pq and pgx's stdlib: one Retention runs
// and prunes exactly what is due, another on its own *sql.DB follows, and
// takes over once the first hands its lease back.
func TestRetention(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			db, other := openDB(t, d, 3), openDB(t, d, 3)
			schema := migrated(t, db)
			seedRetention(t, db, schema, 3)

			r, err := postgres.NewRetention(db, &postgres.RetentionConfig{Schema: schema, Holder: "first", LeaseDuration: 2 * time.Second, Interval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			deadline := time.Now().Add(10 * time.Second)
			for st := r.Stats(); st.PublishedDeleted != 3 || st.ProcessedDeleted != 3; st = r.Stats() {
				if time.Now().After(deadline) {
					t.Fatalf("the Retention did not prune within 10s: %+v", st)
				}
				time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
			}
			if keep, due := retained(t, db, schema); keep != 15 || due != 0 {
				t.Fatalf("after the first pass: %d rows to keep (want 15), %d due rows left (want 0)", keep, due)
			}

			follower, err := postgres.NewRetention(other, &postgres.RetentionConfig{Schema: schema, Holder: "second"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := follower.RunOnce(context.Background())
			if err != nil || res.Leader || res.Holder != "first" {
				t.Fatalf("RunOnce beside a leader = %+v, %v; want a follower of first", res, err)
			}

			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			seedRetention(t, db, schema, 2)
			res, err = follower.RunOnce(context.Background())
			if err != nil || !res.Leader || res.PublishedDeleted != 2 || res.ProcessedDeleted != 2 {
				t.Fatalf("RunOnce once the leader stopped = %+v, %v; want it to lead and prune 2 + 2 rows", res, err)
			}
			if keep, due := retained(t, db, schema); keep != 25 || due != 0 {
				t.Fatalf("after the second pass: %d rows to keep (want 25), %d due rows left (want 0)", keep, due)
			}
			var live bool
			err = db.QueryRowContext(context.Background(), `SELECT until > now() FROM `+pgx.Identifier{schema, "outboxkit_leases"}.Sanitize()+` WHERE name = 'outbox_events/retention'`).Scan(&live)
			if err != nil || live {
				t.Fatalf("lease after RunOnce: live %v, %v; RunOnce hands it back", live, err)
			}
		})
	}
}

// The leader's VACUUM of the partitions (Partitions.Vacuum) through lib/pq
// and pgx's stdlib: its threshold's parameters are typed by the statement,
// not by the driver (lib/pq sends them as text), and VACUUM runs outside
// a transaction.
func TestPartitionsVacuum(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(driverLabel(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d, 3)
			schema := pgtest.Schema(t, pgtest.Pool(t, 2), "sqlvac")
			if err := postgres.Migrate(ctx, db, &postgres.MigrateConfig{Schema: schema, Partitions: postgres.PartitionDaily}); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			var now time.Time
			if err := db.QueryRowContext(ctx, "SELECT now()").Scan(&now); err != nil {
				t.Fatal(err)
			}
			current := postgres.PartitionDaily.PartitionName("outbox_events", now)
			ob := pgx.Identifier{schema, "outbox_events"}.Sanitize()
			for _, q := range []string{
				// Only the VACUUM under test removes the dead rows.
				`ALTER TABLE ` + pgx.Identifier{schema, current}.Sanitize() + ` SET (autovacuum_enabled = false)`,
				`INSERT INTO ` + ob + ` (event_type, payload) SELECT 'vacuum.test', '{}' FROM generate_series(1, 2000)`,
				`UPDATE ` + ob + ` SET published_at = now()`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			dead := func() (n int64) {
				if err := db.QueryRowContext(ctx, `SELECT COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2), -1)`, schema, current).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			// The statistics trail the statements by about a second.
			deadline := time.Now().Add(20 * time.Second)
			for dead() < 2000 {
				if time.Now().After(deadline) {
					t.Fatalf("the statistics did not count %s's 2000 dead rows within 20s", current)
				}
				time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
			}
			p, err := postgres.NewPartitions(db, &postgres.PartitionsConfig{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := p.Vacuum(ctx)
			if err != nil || len(rep.Vacuumed) != 1 || rep.Vacuumed[0] != current || rep.DeadRows < 2000 {
				t.Fatalf("Vacuum = %+v, %v; want %s vacuumed with at least 2000 dead rows", rep, err, current)
			}
			if n := dead(); n != 0 {
				t.Fatalf("%s has %d dead rows after the VACUUM, want 0", current, n)
			}
		})
	}
}
