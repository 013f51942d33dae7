package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// migrate --partitions, called as cmdMigrate would once the flag is
// registered (registerPartitionsFlag): new tables partitioned, a plain
// one converted online, an unknown layout refused.
func TestMigratePartitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	newApp := func(schema string) (*app, *bytes.Buffer) {
		var out, errs bytes.Buffer
		return &app{stdout: &out, stderr: &errs, g: globals{databaseURL: pgtest.URL(), schema: schema, table: postgres.DefaultTable}}, &out
	}
	kind := func(schema string) string {
		var k string
		if err := pool.QueryRow(ctxT(t), `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, `"`+schema+`".outbox_events`).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}

	fresh := pgtest.Schema(t, pool, "outboxctl_part")
	a, out := newApp(fresh)
	if err := a.migratePartitioned(ctxT(t), "hourly"); err != nil {
		t.Fatal(err)
	}
	if k := kind(fresh); k != "p" || !strings.Contains(out.String(), "hourly partitions for new tables") {
		t.Fatalf("new schema: table kind %q, output %q", k, out.String())
	}
	a, out = newApp(fresh)
	if err := a.migratePartitioned(ctxT(t), "hourly"); err != nil || !strings.Contains(out.String(), "already up to date") {
		t.Fatalf("second run: %v, %q", err, out.String())
	}

	plain := pgtest.Schema(t, pool, "outboxctl_plain")
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: plain}); err != nil {
		t.Fatal(err)
	}
	a, out = newApp(plain)
	if err := a.migratePartitioned(ctxT(t), "daily"); err != nil {
		t.Fatal(err)
	}
	if k := kind(plain); k != "p" || !strings.Contains(out.String(), "converted: rows created before") || !strings.Contains(out.String(), "outbox_events_legacy") {
		t.Fatalf("plain schema: table kind %q, output %q", k, out.String())
	}

	a, _ = newApp(fresh)
	if err := a.migratePartitioned(ctxT(t), "weekly"); err == nil || !strings.Contains(err.Error(), "weekly") {
		t.Fatalf("--partitions weekly = %v, want a usage error naming it", err)
	}
	if _, _, err := a.partitionedMigrator(nil, "daily"); err != nil {
		t.Fatalf("printing migrator: %v", err)
	}
}
