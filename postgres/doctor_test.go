package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// describeFindings prints a report for failure messages.
func describeFindings(rep *postgres.DoctorReport) string {
	var b strings.Builder
	for _, f := range rep.Findings {
		fmt.Fprintf(&b, "\n  [%s] %s %s: %s (fix: %s)", f.Severity, f.Check, f.Object, f.Summary, f.Fix)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(&b, "\n  skipped %s: %s", s.Check, s.Reason)
	}
	if b.Len() == 0 {
		return " nothing"
	}
	return b.String()
}

// finding returns the report's finding of check about object.
func finding(rep *postgres.DoctorReport, check, object string) (postgres.Finding, bool) {
	for _, f := range rep.Findings {
		if f.Check == check && f.Object == object {
			return f, true
		}
	}
	return postgres.Finding{}, false
}

func mustFinding(t *testing.T, rep *postgres.DoctorReport, check, object string, sev postgres.Severity) postgres.Finding {
	t.Helper()
	f, ok := finding(rep, check, object)
	if !ok {
		t.Fatalf("no %s finding about %s; the report:%s", check, object, describeFindings(rep))
	}
	if f.Severity != sev {
		t.Errorf("%s finding about %s is %s, want %s: %s", check, object, f.Severity, sev, f.Summary)
	}
	if f.Summary == "" || f.Fix == "" {
		t.Errorf("%s finding about %s says too little: %+v", check, object, f)
	}
	return f
}

func doctor(t *testing.T, pool *pgxpool.Pool, cfg postgres.DoctorConfig) *postgres.DoctorReport {
	t.Helper()
	rep, err := postgres.Doctor(ctxT(t), pool, &cfg)
	if err != nil {
		t.Fatalf("doctor: %v", err)
	}
	return rep
}

// tableScoped are the checks that look at the outbox's own objects only,
// whatever else the shared test server runs.
var tableScoped = []string{postgres.CheckMigrations, postgres.CheckIndexes, postgres.CheckTableBloat,
	postgres.CheckPendingIndex, postgres.CheckGenericPlan, postgres.CheckStatistics, postgres.CheckClockSkew}

// publishAll relays every due event of s to a publisher that accepts all.
func publishAll(t *testing.T, s *postgres.Store) {
	t.Helper()
	relayThrough(t, s, core.PublisherFunc(func(context.Context, []core.Event) error { return nil }))
}

// fillPublished writes n published events, and pending ones, with plain
// SQL, then analyzes the table: a table past the size where plans matter.
func fillPublished(t *testing.T, pool *pgxpool.Pool, schema string, n, pending int) {
	t.Helper()
	tbl := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	_, err := pool.Exec(ctxT(t), fmt.Sprintf(`
INSERT INTO %[1]s (id, event_type, payload, created_at, available_at, published_at)
SELECT gen_random_uuid(), 'old', '{"n": 1}', now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
FROM generate_series(1, %[2]d);
INSERT INTO %[1]s (id, event_type, payload) SELECT gen_random_uuid(), 'new', '{"n": 1}' FROM generate_series(1, %[3]d);
ANALYZE %[1]s`, tbl, n, pending))
	if err != nil {
		t.Fatal(err)
	}
}

func TestDoctorHealthySchemaOnTheSharedServer(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := newStore(t, db, postgres.Config{})
	if err := addTx(ctxT(t), s, db.pool, events(t, 300, "order.placed")...); err != nil {
		t.Fatal(err)
	}
	publishAll(t, s)
	if rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: tableScoped}); len(rep.Findings)+len(rep.Skipped) != 0 {
		t.Errorf("a healthy young outbox:%s", describeFindings(rep))
	}
	// Grown past the size where plans and statistics matter, analyzed.
	fillPublished(t, db.pool, db.schema, 40000, 100)
	if rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: tableScoped, Ordering: true}); len(rep.Findings)+len(rep.Skipped) != 0 {
		t.Errorf("a healthy grown outbox:%s", describeFindings(rep))
	}
}

func TestDoctorFindsMissingIndexes(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ctx := ctxT(t)
	fillPublished(t, db.pool, db.schema, 40000, 100)
	checks := []string{postgres.CheckIndexes, postgres.CheckGenericPlan, postgres.CheckPendingIndex}
	if rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks}); len(rep.Findings) != 0 {
		t.Fatalf("before dropping anything:%s", describeFindings(rep))
	}
	idx := func(name string) string { return "index " + db.schema + ".outbox_events_" + name }
	for _, name := range []string{"pending_idx", "slot_idx", "aggregate_idx"} {
		if _, err := db.pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{db.schema, "outbox_events_" + name}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks})
	f := mustFinding(t, rep, postgres.CheckIndexes, idx("pending_idx"), postgres.SeverityCritical)
	if !strings.Contains(f.Fix, "CREATE INDEX CONCURRENTLY IF NOT EXISTS \"outbox_events_pending_idx\"") {
		t.Errorf("the fix does not give the statement: %s", f.Fix)
	}
	mustFinding(t, rep, postgres.CheckIndexes, idx("slot_idx"), postgres.SeverityWarning)
	// Without ordering the aggregate index is only worth knowing about.
	mustFinding(t, rep, postgres.CheckIndexes, idx("aggregate_idx"), postgres.SeverityInfo)
	// Both claims the relays run now scan the table in their generic plan.
	var plans int
	for _, f := range rep.Findings {
		if f.Check == postgres.CheckGenericPlan {
			plans++
			if f.Object != "table "+db.schema+".outbox_events" || !strings.Contains(f.Summary, "scans the whole outbox table") {
				t.Errorf("generic-plan finding %+v", f)
			}
		}
	}
	if plans != 2 {
		t.Errorf("%d generic-plan findings, want 2 (claim, slot claim):%s", plans, describeFindings(rep))
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Check != postgres.CheckPendingIndex || !strings.Contains(rep.Skipped[0].Reason, "outbox_events_pending_idx") {
		t.Errorf("skipped %+v, want the pending-index check, which has no index to look at", rep.Skipped)
	}

	// With ordering the aggregate index is required; with destination
	// claims, an index led by the destination.
	rep = doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: []string{postgres.CheckIndexes}, Ordering: true, Destinations: true})
	mustFinding(t, rep, postgres.CheckIndexes, idx("aggregate_idx"), postgres.SeverityCritical)
	f = mustFinding(t, rep, postgres.CheckIndexes, "table "+db.schema+".outbox_events", postgres.SeverityWarning)
	if !strings.Contains(f.Fix, "(destination, available_at, pos)") {
		t.Errorf("destination fix: %s", f.Fix)
	}
	// Running the fixes the findings give makes them go away.
	for _, f := range rep.Findings {
		stmt := f.Fix
		if i := strings.Index(stmt, "CREATE INDEX"); i >= 0 {
			stmt = stmt[i:]
		} else {
			t.Fatalf("finding without a statement to run: %+v", f)
		}
		if _, err := db.pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if _, err := db.pool.Exec(ctx, "ANALYZE "+pgx.Identifier{db.schema, "outbox_events"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	checks = append(checks, postgres.CheckMigrations)
	if rep = doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks, Ordering: true, Destinations: true}); len(rep.Findings)+len(rep.Skipped) != 0 {
		t.Errorf("after the fixes:%s", describeFindings(rep))
	}
}

func TestDoctorMigrationsBehind(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	checks := []string{postgres.CheckMigrations}
	if rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks}); len(rep.Findings) != 0 {
		t.Fatalf("migrated schema:%s", describeFindings(rep))
	}
	m, err := postgres.NewMigrator(db.pool, &postgres.MigrateConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, 7); err != nil {
		t.Fatal(err)
	}
	object := "table " + db.schema + ".outbox_events"
	f := mustFinding(t, doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks}), postgres.CheckMigrations, object, postgres.SeverityCritical)
	if !strings.Contains(f.Summary, "version 7") || !strings.Contains(f.Summary, "missing: 8, 9") || !strings.Contains(f.Fix, "outboxctl migrate --schema "+db.schema) {
		t.Errorf("finding: %+v", f)
	}
	// No tables at all: every table-scoped check that needs them says so
	// in Skipped rather than failing.
	rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Table: "nothing_here", Checks: tableScoped})
	mustFinding(t, rep, postgres.CheckMigrations, "table "+db.schema+".nothing_here", postgres.SeverityCritical)
	if len(rep.Skipped) == 0 {
		t.Errorf("no check was skipped on a missing table:%s", describeFindings(rep))
	}
}

func TestDoctorClockSkew(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	checks := []string{postgres.CheckClockSkew}
	if rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks}); len(rep.Findings) != 0 {
		t.Fatalf("the same host's clock:%s", describeFindings(rep))
	}
	// A host whose clock runs 30 s behind the database's.
	slow := func() time.Time { return time.Now().Add(-30 * time.Second) }
	rep := doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks, Now: slow})
	if len(rep.Findings) != 1 {
		t.Fatalf("30 s behind:%s", describeFindings(rep))
	}
	f := rep.Findings[0]
	if f.Severity != postgres.SeverityWarning || f.Age < 29*time.Second || f.Age > 31*time.Second || !strings.Contains(f.Summary, "ahead of this host") {
		t.Errorf("finding: %+v", f)
	}
	// A minute or more is critical.
	fast := func() time.Time { return time.Now().Add(2 * time.Minute) }
	rep = doctor(t, db.pool, postgres.DoctorConfig{Schema: db.schema, Checks: checks, Now: fast})
	if len(rep.Findings) != 1 || rep.Findings[0].Severity != postgres.SeverityCritical || !strings.Contains(rep.Findings[0].Summary, "behind this host") {
		t.Errorf("2 min ahead:%s", describeFindings(rep))
	}
}

// TestDoctorLongTransactionOnTheSharedServer opens a transaction in
// another connection and finds it by its PID among whatever else the
// shared server runs.
func TestDoctorLongTransactionOnTheSharedServer(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	ctx := ctxT(t)
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pid := int(conn.Conn().PgConn().PID())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the test's end
	if _, err := tx.Exec(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	cfg := postgres.DoctorConfig{Schema: db.schema, Checks: []string{postgres.CheckXminHorizon, postgres.CheckIdleInTransaction},
		LongTransaction: time.Microsecond, IdleInTransaction: time.Microsecond}
	object := fmt.Sprintf("pid %d", pid)
	rep := doctor(t, db.pool, cfg)
	if f := mustFinding(t, rep, postgres.CheckXminHorizon, object, postgres.SeverityCritical); f.PID != pid || f.Age <= 0 {
		t.Errorf("xmin-horizon finding: %+v", f)
	}
	if f := mustFinding(t, rep, postgres.CheckIdleInTransaction, object, postgres.SeverityWarning); f.PID != pid || !strings.Contains(f.Fix, fmt.Sprintf("pg_terminate_backend(%d)", pid)) {
		t.Errorf("idle-in-transaction finding: %+v", f)
	}
	// Under the default thresholds a transaction this young is nobody's
	// business.
	cfg.LongTransaction, cfg.IdleInTransaction = 0, 0
	rep = doctor(t, db.pool, cfg)
	if _, ok := finding(rep, postgres.CheckXminHorizon, object); ok {
		t.Errorf("a young transaction is reported:%s", describeFindings(rep))
	}
}

func TestDoctorConfig(t *testing.T) {
	t.Parallel()
	db := newDB(t, 1)
	if _, err := postgres.Doctor(ctxT(t), db.pool, &postgres.DoctorConfig{Checks: []string{"vibes"}}); err == nil || !strings.Contains(err.Error(), "unknown check \"vibes\"") {
		t.Errorf("unknown check: %v", err)
	}
	if _, err := postgres.Doctor(ctxT(t), db.pool, &postgres.DoctorConfig{Schema: "no;way"}); err == nil {
		t.Error("a bad schema name is accepted")
	}
	// Findings travel as JSON with their severity's name and ages in
	// seconds.
	b, err := json.Marshal(postgres.Finding{Check: "clock-skew", Severity: postgres.SeverityCritical, Age: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"severity":"critical"`) || !strings.Contains(string(b), `"age_seconds":90`) {
		t.Errorf("finding JSON: %s", b)
	}
	var back postgres.Finding
	if err := json.Unmarshal(b, &back); err != nil || back.Severity != postgres.SeverityCritical || back.Age != 90*time.Second {
		t.Errorf("finding JSON round trip: %+v, %v", back, err)
	}
}

// TestDoctorOnAServerOfItsOwn runs the server-wide checks on a cluster no
// other test uses: healthy, then each condition built on purpose and
// reported exactly, then healthy again.
func TestDoctorOnAServerOfItsOwn(t *testing.T) {
	t.Parallel()
	c := newScratchCluster(t, "autovacuum_naptime=1s", "wal_level=logical", "max_replication_slots=4", "max_wal_senders=4")
	pool := c.pool(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const schema = "doctor"
	tbl := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	object := "table doctor.outbox_events"
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	write := func(n int) {
		t.Helper()
		for i := 0; i < n; i += 1000 {
			if err := addTx(ctx, s, pool, events(t, 1000, "order.placed")...); err != nil {
				t.Fatal(err)
			}
		}
		publishAll(t, s)
		// A backend reports its row counts when it ends, or when idle up
		// to ten seconds later: close the pool's connections so every
		// count is in before the checks read the statistics.
		pool.Reset()
	}
	run := func(cfg postgres.DoctorConfig) *postgres.DoctorReport {
		t.Helper()
		cfg.Schema = schema
		rep, err := postgres.Doctor(ctx, pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// Autovacuum (every second here) vacuums and analyzes what the relay
	// left; wait for it rather than vacuuming by hand.
	write(20000)
	waitFor(t, 2*time.Minute, "autovacuum to vacuum and analyze the outbox", func() bool {
		var done bool
		err := pool.QueryRow(ctx, `SELECT last_autovacuum IS NOT NULL AND last_autoanalyze IS NOT NULL AND n_dead_tup < 1000
FROM pg_stat_all_tables WHERE relid = $1::regclass`, tbl).Scan(&done)
		return err == nil && done
	})

	t.Run("healthy", func(t *testing.T) {
		if rep := run(postgres.DoctorConfig{}); len(rep.Findings)+len(rep.Skipped) != 0 {
			t.Errorf("a healthy server:%s", describeFindings(rep))
		}
	})

	t.Run("long transaction", func(t *testing.T) {
		other, err := pgx.Connect(ctx, c.url)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(context.Background())
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
		pid := int(other.PgConn().PID())
		// What the relays settle meanwhile cannot be vacuumed away.
		write(2000)
		if _, err := pool.Exec(ctx, "VACUUM "+tbl); err != nil {
			t.Fatal(err)
		}
		rep := run(postgres.DoctorConfig{LongTransaction: time.Microsecond, IdleInTransaction: time.Microsecond})
		mustFinding(t, rep, postgres.CheckXminHorizon, fmt.Sprintf("pid %d", pid), postgres.SeverityCritical)
		mustFinding(t, rep, postgres.CheckIdleInTransaction, fmt.Sprintf("pid %d", pid), postgres.SeverityWarning)
		f := mustFinding(t, rep, postgres.CheckAutovacuum, object, postgres.SeverityWarning)
		if !strings.Contains(f.Summary, "holds back the xmin horizon") || f.Count < 3000 {
			t.Errorf("autovacuum finding: %+v", f)
		}
		for _, f := range rep.Findings {
			switch f.Check {
			case postgres.CheckXminHorizon, postgres.CheckIdleInTransaction, postgres.CheckAutovacuum, postgres.CheckTableBloat:
			default:
				t.Errorf("unexpected finding [%s] %s %s: %s", f.Severity, f.Check, f.Object, f.Summary)
			}
		}
		// Ended, the transaction holds nothing back: the next vacuum
		// cleans up and the report is empty again.
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+tbl); err != nil {
			t.Fatal(err)
		}
		if rep := run(postgres.DoctorConfig{LongTransaction: time.Microsecond, IdleInTransaction: time.Microsecond}); len(rep.Findings) != 0 {
			t.Errorf("after the rollback:%s", describeFindings(rep))
		}
	})

	t.Run("inactive replication slots", func(t *testing.T) {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		logical, physical := "okdoctor_logical_"+hex.EncodeToString(b), "okdoctor_physical_"+hex.EncodeToString(b)
		drop := func() {
			for _, name := range []string{logical, physical} {
				_, _ = pool.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
			}
		}
		t.Cleanup(drop)
		if _, err := pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", logical); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", physical); err != nil {
			t.Fatal(err)
		}
		// A megabyte of WAL that both slots now retain.
		if _, err := pool.Exec(ctx, "SELECT pg_logical_emit_message(false, 'outboxkit-test', repeat('x', 1048576))"); err != nil {
			t.Fatal(err)
		}
		rep := run(postgres.DoctorConfig{SlotRetainedWAL: 256 << 10})
		for _, name := range []string{logical, physical} {
			f := mustFinding(t, rep, postgres.CheckReplicationSlots, "slot "+name, postgres.SeverityCritical)
			if f.Bytes < 1<<20 || !strings.Contains(f.Fix, "pg_drop_replication_slot('"+name+"')") {
				t.Errorf("slot finding: %+v", f)
			}
		}
		if len(rep.Findings) != 2 {
			t.Errorf("want the two slots only:%s", describeFindings(rep))
		}
		// Under the default 1 GiB a megabyte only makes them warnings.
		rep = run(postgres.DoctorConfig{Checks: []string{postgres.CheckReplicationSlots}})
		mustFinding(t, rep, postgres.CheckReplicationSlots, "slot "+logical, postgres.SeverityWarning)
		drop()
		if rep := run(postgres.DoctorConfig{}); len(rep.Findings) != 0 {
			t.Errorf("after dropping the slots:%s", describeFindings(rep))
		}
	})

	t.Run("autovacuum disabled on the table", func(t *testing.T) {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+tbl+" SET (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
		rep := run(postgres.DoctorConfig{})
		mustFinding(t, rep, postgres.CheckAutovacuum, object, postgres.SeverityWarning)
		if len(rep.Findings) != 1 {
			t.Errorf("want the table's setting only:%s", describeFindings(rep))
		}

		// 30,000 events written and published with plain SQL: each
		// leaves a dead row version and a dead entry in the pending
		// index, and nothing vacuums them.
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, `INSERT INTO `+tbl+` (id, event_type, payload) SELECT gen_random_uuid(), 'e', '{}' FROM generate_series(1, 30000)`)
		if err == nil {
			_, err = conn.Exec(ctx, `UPDATE `+tbl+` SET published_at = now() WHERE published_at IS NULL`)
		}
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		}
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT 1`)
		}
		conn.Release()
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the statistics to count the dead rows", func() bool {
			var dead int64
			err := pool.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_all_tables WHERE relid = $1::regclass`, tbl).Scan(&dead)
			return err == nil && dead >= 30000
		})
		rep = run(postgres.DoctorConfig{})
		if f := mustFinding(t, rep, postgres.CheckAutovacuum, object, postgres.SeverityWarning); f.Count < 30000 || !strings.Contains(f.Fix, "RESET (autovacuum_enabled)") {
			t.Errorf("autovacuum finding: %+v", f)
		}
		if f := mustFinding(t, rep, postgres.CheckTableBloat, object, postgres.SeverityWarning); f.Count < 30000 {
			t.Errorf("table-bloat finding counts %d dead rows, want 30000 or more", f.Count)
		}
		if f := mustFinding(t, rep, postgres.CheckPendingIndex, "index doctor.outbox_events_pending_idx", postgres.SeverityWarning); f.Count <= 512 {
			t.Errorf("pending-index finding reads %d buffers", f.Count)
		}
		if len(rep.Findings) != 3 {
			t.Errorf("want the table's setting and what it left:%s", describeFindings(rep))
		}

		// VACUUM removes the dead rows and their index entries; the
		// table's setting is reported until it is reset.
		if _, err := pool.Exec(ctx, "VACUUM "+tbl); err != nil {
			t.Fatal(err)
		}
		rep = run(postgres.DoctorConfig{})
		mustFinding(t, rep, postgres.CheckAutovacuum, object, postgres.SeverityWarning)
		if len(rep.Findings) != 1 {
			t.Errorf("after VACUUM, want the table's setting only:%s", describeFindings(rep))
		}
		if _, err := pool.Exec(ctx, "ALTER TABLE "+tbl+" RESET (autovacuum_enabled)"); err != nil {
			t.Fatal(err)
		}
		if rep := run(postgres.DoctorConfig{}); len(rep.Findings) != 0 {
			t.Errorf("after RESET:%s", describeFindings(rep))
		}
	})

	t.Run("invalid index", func(t *testing.T) {
		// A unique index over duplicates fails when built concurrently
		// and stays behind, invalid, under the published index's name.
		if _, err := pool.Exec(ctx, `DROP INDEX doctor.outbox_events_published_idx`); err != nil {
			t.Fatal(err)
		}
		_, err := pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY outbox_events_published_idx ON `+tbl+` (event_type) WHERE published_at IS NOT NULL`)
		if err == nil {
			t.Fatal("a unique index over duplicate event types was built")
		}
		index := "index doctor.outbox_events_published_idx"
		f := mustFinding(t, run(postgres.DoctorConfig{}), postgres.CheckIndexes, index, postgres.SeverityWarning)
		if !strings.Contains(f.Summary, "invalid") || !strings.Contains(f.Fix, "REINDEX INDEX CONCURRENTLY") {
			t.Errorf("invalid index finding: %+v", f)
		}
		// Dropped, it is missing; the statement the finding gives builds
		// it back.
		if _, err := pool.Exec(ctx, `DROP INDEX doctor.outbox_events_published_idx`); err != nil {
			t.Fatal(err)
		}
		f = mustFinding(t, run(postgres.DoctorConfig{}), postgres.CheckIndexes, index, postgres.SeverityWarning)
		stmt := f.Fix[strings.Index(f.Fix, "CREATE INDEX"):]
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		if rep := run(postgres.DoctorConfig{}); len(rep.Findings) != 0 {
			t.Errorf("after rebuilding the index:%s", describeFindings(rep))
		}
	})
}

// TestDoctorThroughPgBouncerAndDatabaseSQL: the checks run on a pool
// through PgBouncer in transaction mode (the generic plan is prepared and
// explained inside one transaction) and on a *sql.DB.
func TestDoctorThroughPgBouncerAndDatabaseSQL(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	fillPublished(t, db.pool, db.schema, 40000, 100)
	pgtest.RequireBouncer(t)
	bouncer, err := postgres.NewPool(ctx, pgtest.BouncerURLWithMaxConns(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bouncer.Close)
	sqlDB, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = sqlDB.Close() })
	cfg := &postgres.DoctorConfig{Schema: db.schema, Checks: tableScoped}
	check := func(want int) {
		t.Helper()
		for name, run := range map[string]func() (*postgres.DoctorReport, error){
			"pgbouncer":    func() (*postgres.DoctorReport, error) { return postgres.Doctor(ctx, bouncer, cfg) },
			"database/sql": func() (*postgres.DoctorReport, error) { return postgres.Doctor(ctx, sqlDB, cfg) },
		} {
			rep, err := run()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plans := 0
			for _, f := range rep.Findings {
				if f.Check == postgres.CheckGenericPlan {
					plans++
				}
			}
			if plans != want || len(rep.Skipped) > 0 && want == 0 {
				t.Errorf("%s: %d generic-plan findings, want %d:%s", name, plans, want, describeFindings(rep))
			}
		}
	}
	check(0)
	// Every check runs on both (what they find on the shared server
	// varies; that they all run does not).
	for name, rep := range map[string]func() (*postgres.DoctorReport, error){
		"pgbouncer": func() (*postgres.DoctorReport, error) {
			return postgres.Doctor(ctx, bouncer, &postgres.DoctorConfig{Schema: db.schema})
		},
		"database/sql": func() (*postgres.DoctorReport, error) {
			return postgres.Doctor(ctx, sqlDB, &postgres.DoctorConfig{Schema: db.schema})
		},
	} {
		r, err := rep()
		if err != nil || len(r.Skipped) != 0 {
			t.Errorf("%s, every check: err %v, skipped %+v", name, err, r.Skipped)
		}
	}
	for _, name := range []string{"outbox_events_pending_idx", "outbox_events_slot_idx"} {
		if _, err := db.pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{db.schema, name}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	check(2)
	// Nothing was left prepared on PgBouncer's server connections.
	var left int
	if err := bouncer.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'outboxkit_doctor%'").Scan(&left); err != nil || left != 0 {
		t.Errorf("prepared statements left behind: %d, %v", left, err)
	}
}

// TestDoctorAndReconcileOnAPartitionedOutbox: the partitioned layout keys
// each partition on id, which the indexes check looks for partition by
// partition; the checks that read a plain table's statistics say they
// skipped it rather than pass it; reconcile works through the parent.
func TestDoctorAndReconcileOnAPartitionedOutbox(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	ctx := ctxT(t)
	schema := pgtest.Schema(t, pool, "pgpart")
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema, Partitions: postgres.PartitionDaily}); err != nil {
		t.Fatal(err)
	}
	rep := doctor(t, pool, postgres.DoctorConfig{Schema: schema, Checks: tableScoped})
	if len(rep.Findings) != 0 {
		t.Errorf("a fresh partitioned outbox:%s", describeFindings(rep))
	}
	skipped := map[string]bool{}
	for _, s := range rep.Skipped {
		skipped[s.Check] = strings.Contains(s.Reason, "partitioned")
	}
	for _, c := range []string{postgres.CheckTableBloat, postgres.CheckPendingIndex, postgres.CheckGenericPlan, postgres.CheckStatistics} {
		if !skipped[c] {
			t.Errorf("%s not skipped as partitioned:%s", c, describeFindings(rep))
		}
	}

	// A partition without its primary key.
	var part, constraint string
	err := pool.QueryRow(ctx, `SELECT c.relname, k.conname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'p'
WHERE i.inhparent = $1::regclass ORDER BY c.relname LIMIT 1`, pgx.Identifier{schema, "outbox_events"}.Sanitize()).Scan(&part, &constraint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, part}.Sanitize()+" DROP CONSTRAINT "+pgx.Identifier{constraint}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	rep = doctor(t, pool, postgres.DoctorConfig{Schema: schema, Checks: []string{postgres.CheckIndexes}})
	mustFinding(t, rep, postgres.CheckIndexes, "primary key of partition "+schema+"."+part, postgres.SeverityCritical)
	if len(rep.Findings) != 1 {
		t.Errorf("want that partition only:%s", describeFindings(rep))
	}

	// Reconcile reads the partitioned tables through their parents.
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	dedup, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, 60, "order.placed")
	if err := addTx(ctx, s, pool, evs...); err != nil {
		t.Fatal(err)
	}
	relayThrough(t, s, core.PublisherFunc(func(ctx context.Context, got []core.Event) error {
		for _, e := range got {
			if e.ID == evs[7].ID {
				continue
			}
			if _, err := dedup.Once(ctx, core.DedupeKey{Consumer: "billing", EventID: e.ID}, func(context.Context) error { return nil }); err != nil {
				return err
			}
		}
		return nil
	}))
	r, err := postgres.Reconcile(ctx, pool, pool, &postgres.ReconcileConfig{Schema: schema, Consumer: "billing", Grace: -1, PageSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	if r.Published != 60 || r.Applied != 59 || r.Missing != 1 || len(r.MissingEvents) != 1 || r.MissingEvents[0].ID != evs[7].ID || r.Phantoms != 0 {
		t.Errorf("partitioned reconcile: %s", counts(r))
	}
}
