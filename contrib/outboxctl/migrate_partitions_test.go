package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// relkind is what pg_class says schema.table is ("r" plain, "p"
// partitioned, "" missing).
func relkind(t *testing.T, pool *pgxpool.Pool, schema, table string) string {
	t.Helper()
	var k *string
	if err := pool.QueryRow(ctxT(t), `SELECT (SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1))`, `"`+schema+`".`+table).Scan(&k); err != nil {
		t.Fatal(err)
	}
	if k == nil {
		return ""
	}
	return *k
}

// rowsByState lists a table's rows as "id state", sorted.
func rowsByState(t *testing.T, o outbox) []string {
	t.Helper()
	rows, err := o.pool.Query(ctxT(t), `SELECT id::text || ' ' || CASE WHEN dead_at IS NOT NULL THEN 'dead' WHEN published_at IS NOT NULL THEN 'published' ELSE 'pending' END FROM `+o.table())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestMigratePartitionsNewSchema: migrate --partitions on a schema without
// the outbox tables creates both partitioned; a second run has nothing to
// do, and a plain migrate after it leaves the layout alone.
func TestMigratePartitionsNewSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "outboxctl_part")

	r := cli(t, env(), "migrate", "--partitions", "hourly", "--schema", schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "applied 001_outbox") || !strings.Contains(r.stdout, "(hourly partitions for new tables)") {
		t.Errorf("migrate --partitions hourly: %q", r.stdout)
	}
	for _, table := range []string{"outbox_events", "outbox_events_processed"} {
		if k := relkind(t, pool, schema, table); k != "p" {
			t.Errorf("%s is of kind %q after migrate --partitions hourly, want p (partitioned)", table, k)
		}
	}
	var parts int
	if err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass($1)`, `"`+schema+`".outbox_events`).Scan(&parts); err != nil || parts < 2 {
		t.Errorf("%d partitions of the outbox table (%v), want the default one and the current hour's at least", parts, err)
	}

	r = cli(t, env(), "migrate", "--partitions", "hourly", "--schema", schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already up to date") || strings.Contains(r.stderr, "partitioned") {
		t.Errorf("second migrate --partitions hourly: %q, stderr %q", r.stdout, r.stderr)
	}
	// Another period leaves the table's, and says so.
	r = cli(t, env(), "migrate", "--partitions", "daily", "--schema", schema)
	wantOK(t, r)
	if !strings.Contains(r.stderr, "is partitioned hourly already: --partitions daily applies to tables migrate creates") || !strings.Contains(r.stdout, "already up to date") {
		t.Errorf("migrate --partitions daily on hourly partitions:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
	// The subcommand spelling runs the same.
	r = cli(t, env(), "migrate", "--partitions", "hourly", "--schema", schema, "up")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already up to date") {
		t.Errorf("migrate --partitions hourly up: %q", r.stdout)
	}
	r = cli(t, env(), "migrate", "--schema", schema)
	wantOK(t, r)
	if k := relkind(t, pool, schema, "outbox_events"); !strings.Contains(r.stdout, "already up to date") || k != "p" {
		t.Errorf("plain migrate on the partitioned schema: %q, table kind %q", r.stdout, k)
	}
	r = cli(t, env(), "migrate", "status", "--schema", schema)
	wantOK(t, r)
	if strings.Contains(r.stdout, "pending") {
		t.Errorf("migrate status after migrate --partitions:\n%s", r.stdout)
	}

	// Periods of minutes.
	minutes := pgtest.Schema(t, pool, "outboxctl_part15")
	r = cli(t, env(), "migrate", "--partitions", "15m", "--schema", minutes)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "(15m partitions for new tables)") {
		t.Errorf("migrate --partitions 15m: %q", r.stdout)
	}
	for _, table := range []string{"outbox_events", "outbox_events_processed"} {
		if k := relkind(t, pool, minutes, table); k != "p" {
			t.Errorf("%s is of kind %q after migrate --partitions 15m, want p", table, k)
		}
	}
}

// TestMigratePartitionsHelp: migrate --help documents --partitions and
// every kind of layout it takes.
func TestMigratePartitionsHelp(t *testing.T) {
	t.Parallel()
	r := cli(t, env(), "migrate", "--help")
	wantOK(t, r)
	for _, want := range []string{"\n  --partitions layout\n", "daily, hourly or a period of minutes such as 15m", "outboxctl migrate --partitions daily"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate --help does not say %q:\n%s", want, r.stdout)
		}
	}
}

// TestMigratePartitionsConvertsPlain: on a plain outbox table holding
// rows, migrate --partitions converts it online and keeps every row, in
// its state.
func TestMigratePartitionsConvertsPlain(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	o.insertSQL(t, 3, "order.pending")
	o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, created_at, published_at) SELECT gen_random_uuid(), 'order.published', '{}', now() - interval '2 days', now() - interval '1 day' FROM generate_series(1, 4)`)
	o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, dead_at, last_error) SELECT gen_random_uuid(), 'order.dead', '{}', now(), 'poison' FROM generate_series(1, 2)`)
	before := rowsByState(t, o)
	if len(before) != 9 {
		t.Fatalf("%d rows written, want 9", len(before))
	}

	r := cli(t, env(), "migrate", "--partitions", "daily", "--schema", o.schema)
	wantOK(t, r)
	for _, want := range []string{"converting the plain outbox table to daily partitions", "converted: rows created before", "outbox_events_legacy", "their day's partition",
		"table outbox_events_processed: converted: records of events created before", "outbox_events_processed_legacy"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate --partitions daily on a plain table: no %q in\n%s", want, r.stdout)
		}
	}
	for _, table := range []string{"outbox_events", "outbox_events_processed"} {
		if k := relkind(t, o.pool, o.schema, table); k != "p" {
			t.Errorf("%s is of kind %q after the conversion, want p", table, k)
		}
	}
	if k := relkind(t, o.pool, o.schema, "outbox_events_legacy"); k != "r" {
		t.Errorf("the legacy partition is of kind %q, want r (the old table)", k)
	}
	if after := rowsByState(t, o); !slices.Equal(before, after) {
		t.Errorf("rows changed by the conversion:\nbefore %v\nafter  %v", before, after)
	}
	// Converted, it is the partitioned layout: a second run has nothing
	// to do.
	r = cli(t, env(), "migrate", "--partitions", "daily", "--schema", o.schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already up to date") {
		t.Errorf("migrate --partitions daily after the conversion: %q", r.stdout)
	}
}

// TestMigratePartitionsProcessedLater: a processed table holding a record
// of a random ID stays plain when the outbox table is converted, with a
// warning; once that record is gone, migrate --partitions converts it
// beside the partitioned outbox table.
func TestMigratePartitionsProcessedLater(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	proc := pgx.Identifier{o.schema, "outbox_events_processed"}.Sanitize()
	o.exec(t, `INSERT INTO `+proc+` (consumer, event_id) VALUES ('billing', 'f47ac10b-58cc-4372-a567-0e02b2c3d479')`)
	r := cli(t, env(), "migrate", "--partitions", "daily", "--schema", o.schema)
	wantOK(t, r)
	if !strings.Contains(r.stderr, "stays plain: 1 of its records") {
		t.Errorf("no warning that the processed table stays plain:\n%s", r.stderr)
	}
	if k := relkind(t, o.pool, o.schema, "outbox_events_processed"); k != "r" {
		t.Fatalf("the processed table is of kind %q, want r (plain)", k)
	}
	o.exec(t, `DELETE FROM `+proc)
	r = cli(t, env(), "migrate", "--partitions", "daily", "--schema", o.schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already up to date") || !strings.Contains(r.stdout, "table outbox_events_processed: converted") {
		t.Errorf("migrate --partitions daily beside a plain processed table: %q", r.stdout)
	}
	if k := relkind(t, o.pool, o.schema, "outbox_events_processed"); k != "p" {
		t.Errorf("the processed table is of kind %q, want p", k)
	}
}

// TestMigratePartitionsPrint: --print --partitions prints the partitioned
// layout's script, without a database; applied by hand it creates the
// partitioned tables, and migrate sees it as applied.
func TestMigratePartitionsPrint(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "outboxctl_partprint")

	nodb := env("DATABASE_URL=postgres://nobody@127.0.0.1:1/none")
	plain := cli(t, nodb, "migrate", "--print", "--schema", schema)
	wantOK(t, plain)
	r := cli(t, nodb, "migrate", "--print", "--partitions", "daily", "--schema", schema)
	wantOK(t, r)
	script := r.stdout
	if !strings.Contains(script, "PARTITION BY RANGE") || strings.Contains(plain.stdout, "PARTITION BY RANGE") {
		t.Fatalf("migrate --print --partitions daily does not print the partitioned layout:\n%s", script)
	}
	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Conn().PgConn().Exec(ctxT(t), script).ReadAll()
	conn.Release()
	if err != nil {
		t.Fatalf("apply the printed script: %v", err)
	}
	for _, table := range []string{"outbox_events", "outbox_events_processed"} {
		if k := relkind(t, pool, schema, table); k != "p" {
			t.Errorf("%s is of kind %q after the printed script, want p", table, k)
		}
	}
	r = cli(t, env(), "migrate", "--partitions", "daily", "--schema", schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already up to date") {
		t.Errorf("migrate --partitions daily after the printed script: %q", r.stdout)
	}

	r = cli(t, nodb, "migrate", "--print", "--down", "--partitions", "daily", "--schema", schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "DROP TABLE") {
		t.Errorf("migrate --print --down --partitions daily:\n%s", r.stdout)
	}
}

// TestMigratePartitionsUsage: what --partitions cannot mean is a usage
// error that says what to do, before any database is touched.
func TestMigratePartitionsUsage(t *testing.T) {
	t.Parallel()
	nodb := env("DATABASE_URL=postgres://nobody@127.0.0.1:1/none")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"migrate", "--partitions", "weekly"}, []string{"--partitions", `"weekly" is not a layout`, "daily", "hourly"}},
		{[]string{"migrate", "--print", "--partitions", "weekly"}, []string{"--partitions", `"weekly"`}},
		{[]string{"migrate", "--partitions", "7m"}, []string{"--partitions", `"7m" is not a period of partitions`}},
		{[]string{"migrate", "--partitions", "none"}, []string{"plain layout", "without --partitions"}},
		{[]string{"migrate", "--print", "--partitions", "none"}, []string{"plain layout", "without --partitions"}},
		{[]string{"migrate", "--partitions", "daily", "--down"}, []string{"--down only goes with --print"}},
		{[]string{"migrate", "--partitions", "daily", "status"}, []string{"migrate status ignores it"}},
		{[]string{"migrate", "--partitions", "daily", "down", "--to", "0", "--yes"}, []string{"migrate down ignores it"}},
		{[]string{"migrate", "--partitions", "daily", "up", "extra"}, []string{`unexpected argument "extra"`}},
	} {
		r := cli(t, nodb, c.args...)
		wantOneLineError(t, r, exitError, c.want...)
		if strings.Contains(r.stderr, "127.0.0.1:1") {
			t.Errorf("%v tried the database: %s", c.args, r.stderr)
		}
	}
}
