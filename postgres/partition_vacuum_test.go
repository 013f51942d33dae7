package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// noAutovacuum keeps autovacuum off the tables, wherever the server runs
// it, so that only the VACUUM under test removes their dead rows.
func noAutovacuum(exec func(string, ...any) int64, schema string, tables ...string) {
	for _, table := range tables {
		exec(`ALTER TABLE ` + pgx.Identifier{schema, table}.Sanitize() + ` SET (autovacuum_enabled = false)`)
	}
}

// deadRows makes n dead row versions in the partition (or table) holding
// created_at = at of schema's outbox table: n events written pending,
// then settled, as relays do.
func deadRows(t *testing.T, exec func(string, ...any) int64, schema string, at time.Time, n int) {
	t.Helper()
	ob := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	exec(`INSERT INTO `+ob+` (event_type, payload, created_at, available_at)
SELECT 'vacuum.test', '{}', $1, $1 FROM generate_series(1, $2)`, at, n)
	if got := exec(`UPDATE `+ob+` SET published_at = now() WHERE event_type = 'vacuum.test' AND created_at = $1 AND published_at IS NULL`, at); got != int64(n) {
		t.Fatalf("settled %d events, want %d", got, n)
	}
}

// dbNow is the database's now(), which names the current period's
// partition.
func dbNow(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) time.Time {
	t.Helper()
	var now time.Time
	if err := q.QueryRow(ctxT(t), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// statDeadRows is what pg_stat_user_tables says of the table's dead rows.
func statDeadRows(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema, table string) int64 {
	t.Helper()
	var n int64
	if err := q.QueryRow(ctxT(t), `SELECT COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2), -1)`, schema, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitDeadRows waits until the statistics count at least n dead rows in
// the table: each backend sends its counts to the server's statistics
// about once a second, so they trail the statements.
func waitDeadRows(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema, table string, n int64) {
	t.Helper()
	waitFor(t, 20*time.Second, "the statistics to count the dead rows of "+table, func() bool {
		return statDeadRows(t, q, schema, table) >= n
	})
}

// Vacuum vacuums the partitions whose dead rows reach the threshold (1,000
// plus 2 % of the live rows) and leaves the others, then has nothing left
// to do.
func TestPartitionsVacuum(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	now := dbNow(t, d.pool)
	old := now.Add(-5 * 24 * time.Hour)
	if _, err := d.parts.Create(ctx, old, old.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) int64 { return d.exec(t, sql, args...) }
	current := postgres.PartitionDaily.PartitionName("outbox_events", now)
	older := postgres.PartitionDaily.PartitionName("outbox_events", old)
	noAutovacuum(exec, d.schema, current, older)
	deadRows(t, exec, d.schema, now, 3000)
	deadRows(t, exec, d.schema, old, 500) // under the threshold
	waitDeadRows(t, d.pool, d.schema, current, 3000)
	waitDeadRows(t, d.pool, d.schema, older, 500)

	rep, err := d.parts.Vacuum(ctx)
	if err != nil {
		t.Fatalf("Vacuum: %v", err)
	}
	if !slices.Equal(rep.Vacuumed, []string{current}) || rep.DeadRows < 3000 {
		t.Fatalf("Vacuum = %+v; want %s vacuumed with at least 3000 dead rows, and %s (500 dead rows) left alone", rep, current, older)
	}
	if n := statDeadRows(t, d.pool, d.schema, current); n != 0 {
		t.Errorf("%s has %d dead rows after the VACUUM, want 0", current, n)
	}
	if n := statDeadRows(t, d.pool, d.schema, older); n < 500 {
		t.Errorf("%s has %d dead rows, want its 500 left to autovacuum", older, n)
	}
	rep, err = d.parts.Vacuum(ctx)
	if err != nil || len(rep.Vacuumed) != 0 || rep.DeadRows != 0 {
		t.Fatalf("second Vacuum = %+v, %v; want nothing left to vacuum", rep, err)
	}
}

// On a plain table Vacuum does nothing: its dead rows are autovacuum's.
func TestPartitionsVacuumPlain(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ctx := ctxT(t)
	exec := func(sql string, args ...any) int64 { return pdb{testDB: db}.exec(t, sql, args...) }
	noAutovacuum(exec, db.schema, "outbox_events")
	deadRows(t, exec, db.schema, time.Now(), 3000)
	waitDeadRows(t, db.pool, db.schema, "outbox_events", 3000)
	p, err := postgres.NewPartitions(db.pool, &postgres.PartitionsConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := p.Vacuum(ctx)
	if err != nil || len(rep.Vacuumed) != 0 {
		t.Fatalf("Vacuum of a plain table = %+v, %v; want nothing done", rep, err)
	}
	if n := statDeadRows(t, db.pool, db.schema, "outbox_events"); n < 3000 {
		t.Fatalf("the plain table has %d dead rows after Vacuum, want its 3000 left", n)
	}
}

// VACUUM needs no session: it runs through PgBouncer in transaction mode.
func TestPartitionsVacuumThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool := bouncerPool(t, 4)
	ctx := ctxT(t)
	schema := pgtest.Schema(t, pool, "pgvacbouncer")
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema, Partitions: postgres.PartitionDaily}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	exec := func(sql string, args ...any) int64 {
		return pdb{testDB: testDB{pool: pool, schema: schema}}.exec(t, sql, args...)
	}
	now := dbNow(t, pool)
	current := postgres.PartitionDaily.PartitionName("outbox_events", now)
	noAutovacuum(exec, schema, current)
	deadRows(t, exec, schema, now, 2000)
	waitDeadRows(t, pool, schema, current, 2000)
	p, err := postgres.NewPartitions(pool, &postgres.PartitionsConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := p.Vacuum(ctx)
	if err != nil || !slices.Equal(rep.Vacuumed, []string{current}) {
		t.Fatalf("Vacuum through PgBouncer = %+v, %v; want %s vacuumed", rep, err, current)
	}
	if n := statDeadRows(t, pool, schema, current); n != 0 {
		t.Errorf("%s has %d dead rows after the VACUUM, want 0", current, n)
	}
}

// The retention leader vacuums the partitions between its passes, every
// VacuumInterval, also when that is longer than Interval (the next
// VACUUM's time carries over from pass to pass), and counts it; with a
// negative VacuumInterval it leaves them to autovacuum.
func TestRetentionVacuumsPartitions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		interval, vacuum   time.Duration
		wantVacuum         bool
		passesWithoutCheck int64
	}{
		{name: "every 100ms, passes every 250ms", interval: 250 * time.Millisecond, vacuum: 100 * time.Millisecond, wantVacuum: true},
		{name: "every 250ms, passes every 50ms", interval: 50 * time.Millisecond, vacuum: 250 * time.Millisecond, wantVacuum: true},
		{name: "off", interval: 50 * time.Millisecond, vacuum: -1, passesWithoutCheck: 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := newPartitionedDB(t, postgres.PartitionDaily)
			now := dbNow(t, d.pool)
			current := postgres.PartitionDaily.PartitionName("outbox_events", now)
			exec := func(sql string, args ...any) int64 { return d.exec(t, sql, args...) }
			noAutovacuum(exec, d.schema, current)
			deadRows(t, exec, d.schema, now, 3000)
			waitDeadRows(t, d.pool, d.schema, current, 3000)

			r := runRetention(t, d.pool, postgres.RetentionConfig{Schema: d.schema, Holder: "vacuum", LeaseDuration: 2 * time.Second,
				Interval: c.interval, VacuumInterval: c.vacuum})
			if !c.wantVacuum {
				waitFor(t, 20*time.Second, "five retention passes", func() bool { return r.Stats().Passes >= c.passesWithoutCheck })
				if st := r.Stats(); st.Vacuums != 0 || st.VacuumedDeadRows != 0 || st.VacuumTime != 0 {
					t.Fatalf("with VacuumInterval %v the leader vacuumed: %+v", c.vacuum, st)
				}
				if n := statDeadRows(t, d.pool, d.schema, current); n < 3000 {
					t.Fatalf("%s has %d dead rows; with the leader's VACUUM off they are autovacuum's (kept off it here)", current, n)
				}
				return
			}
			waitFor(t, 20*time.Second, "the leader's VACUUM", func() bool { return r.Stats().Vacuums >= 1 })
			if st := r.Stats(); st.VacuumedDeadRows < 3000 || st.VacuumTime <= 0 {
				t.Fatalf("the leader counted %d dead rows vacuumed in %v, want at least 3000 in some time: %+v", st.VacuumedDeadRows, st.VacuumTime, st)
			}
			if n := statDeadRows(t, d.pool, d.schema, current); n != 0 {
				t.Errorf("%s has %d dead rows after the leader's VACUUM, want 0", current, n)
			}
		})
	}
}

// The leader vacuums by default; only a negative VacuumInterval turns it
// off.
func TestRetentionVacuumIntervalDefault(t *testing.T) {
	if got := (postgres.RetentionConfig{}).WithDefaults().VacuumInterval; got != postgres.DefaultVacuumInterval {
		t.Errorf("default VacuumInterval = %v, want %v", got, postgres.DefaultVacuumInterval)
	}
	if got := (postgres.RetentionConfig{VacuumInterval: -1}).WithDefaults().VacuumInterval; got >= 0 {
		t.Errorf("VacuumInterval -1 became %v; negative turns the leader's VACUUM off", got)
	}
}
