package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

var update = flag.Bool("update", false, "rewrite the generated section of docs/SCHEMA.md")

// freshSchema names a schema that does not exist yet (Migrate creates it) and
// drops it when t ends.
func freshSchema(t *testing.T, pool *pgxpool.Pool, prefix string) string {
	t.Helper()
	name := pgtest.NewSchemaName(prefix)
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func applied(t *testing.T, m *postgres.Migrator) []int {
	t.Helper()
	st, err := m.Status(ctxT(t))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var out []int
	for _, s := range st {
		if s.Applied {
			if s.AppliedAt.IsZero() {
				t.Fatalf("version %d applied without a time", s.Version)
			}
			out = append(out, s.Version)
		}
	}
	return out
}

func tableExists(t *testing.T, pool *pgxpool.Pool, schema, table string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, table}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestMigrateUpStatusDown(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	schema := freshSchema(t, pool, "mig")
	ctx := ctxT(t)
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	all := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got := len(m.Migrations()); got != len(all) {
		t.Fatalf("%d migrations, want %d", got, len(all))
	}
	if got := applied(t, m); len(got) != 0 {
		t.Fatalf("before Up: applied %v on a database that has none (Status must not write)", got)
	}
	got, err := m.Up(ctx)
	if err != nil || !slices.Equal(got, all) {
		t.Fatalf("Up = %v, %v; want %v", got, err, all)
	}
	if got := applied(t, m); !slices.Equal(got, all) {
		t.Fatalf("Status after Up: %v", got)
	}
	// Idempotent: nothing left to do.
	if got, err := m.Up(ctx); err != nil || len(got) != 0 {
		t.Fatalf("second Up = %v, %v; want nothing applied", got, err)
	}
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("Migrate after Up: %v", err)
	}

	got, err = m.Down(ctx, 2)
	if err != nil || !slices.Equal(got, []int{9, 8, 7, 6, 5, 4, 3}) {
		t.Fatalf("Down(2) = %v, %v; want [9 8 7 6 5 4 3]", got, err)
	}
	if tableExists(t, pool, schema, "outbox_events_processed") || !tableExists(t, pool, schema, "outbox_events_aggregates") {
		t.Fatal("Down(2) did not remove exactly migration 3's table")
	}
	if got := applied(t, m); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Status after Down(2): %v", got)
	}
	got, err = m.Down(ctx, 0)
	if err != nil || !slices.Equal(got, []int{2, 1}) {
		t.Fatalf("Down(0) = %v, %v; want [2 1]", got, err)
	}
	for _, tbl := range []string{"outbox_events", "outbox_events_aggregates", "outbox_events_processed"} {
		if tableExists(t, pool, schema, tbl) {
			t.Fatalf("%s survived Down(0)", tbl)
		}
	}
	if got, err := m.Up(ctx); err != nil || !slices.Equal(got, all) {
		t.Fatalf("Up after Down(0) = %v, %v", got, err)
	}
	if _, err := m.Down(ctx, -1); err == nil {
		t.Fatal("Down(-1) succeeded")
	}
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 5)
	schema := freshSchema(t, pool, "migc")
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema})
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	m, err := postgres.NewMigrator((*pgxpool.Pool)(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %q.outboxkit_migrations", schema)).Scan(&n); err != nil || n != len(m.Migrations()) {
		t.Fatalf("%d version rows (%v), want %d: each version must be applied once", n, err, len(m.Migrations()))
	}
}

func TestMigrateTxRollsBackWithTheCaller(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	schema := freshSchema(t, pool, "migtx")
	ctx := ctxT(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.MigrateTx(ctx, tx, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if tableExists(t, pool, schema, "outbox_events") {
		t.Fatal("MigrateTx survived its transaction's rollback")
	}
}

func TestTwoTablesInOneSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	schema := freshSchema(t, pool, "migt")
	ctx := ctxT(t)
	for _, table := range []string{"outbox_events", "billing_outbox"} {
		if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema, Table: table}); err != nil {
			t.Fatalf("migrate %s: %v", table, err)
		}
	}
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: schema, Table: "billing_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if tableExists(t, pool, schema, "billing_outbox") || !tableExists(t, pool, schema, "outbox_events") {
		t.Fatal("reverting one table's migrations touched the other's")
	}
}

// catalog describes every table, column, index and constraint in a schema,
// with the schema's name replaced, so two schemas can be compared.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	ctx := context.Background()
	queries := []string{
		`SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
			CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
			coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') || ' identity=' || a.attidentity::text
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind = 'r'`,
		`SELECT indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = $1`,
		`SELECT c.relname || '.' || con.conname || ': ' || pg_get_constraintdef(con.oid)
		FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1`,
		`SELECT c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`,
		`SELECT 'version ' || target || ' ' || version || ' ' || name FROM ` + "%s.outboxkit_migrations",
	}
	var out []string
	for i, q := range queries {
		var rows pgx.Rows
		var err error
		if i == len(queries)-1 {
			rows, err = pool.Query(ctx, fmt.Sprintf(q, pgx.Identifier{schema}.Sanitize()))
		} else {
			rows, err = pool.Query(ctx, q, schema)
		}
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			out = append(out, strings.ReplaceAll(l, schema, "<schema>"))
		}
	}
	slices.Sort(out)
	return out
}

// TestMigrationSQLMatchesMigrate is the drift check: the printed script,
// applied by hand, leaves the database exactly as Migrate does, and Migrate
// then finds nothing to do.
func TestMigrationSQLMatchesMigrate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	ctx := ctxT(t)
	byHand, byMigrate := freshSchema(t, pool, "drifta"), freshSchema(t, pool, "driftb")

	script, err := postgres.MigrationSQL(&postgres.MigrateConfig{Schema: byHand})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, script); err != nil { // no arguments: the simple protocol runs the whole script
		t.Fatalf("apply printed script: %v", err)
	}
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: byMigrate}); err != nil {
		t.Fatal(err)
	}
	a, b := catalog(t, pool, byHand), catalog(t, pool, byMigrate)
	if !slices.Equal(a, b) {
		t.Fatalf("printed SQL and Migrate disagree:\nscript:  %s\nMigrate: %s", strings.Join(a, "\n         "), strings.Join(b, "\n         "))
	}
	if len(a) < 40 {
		t.Fatalf("catalog has only %d entries; the comparison looks at nothing", len(a))
	}
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: byHand})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Up(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Up after the printed script = %v, %v; want nothing to do", got, err)
	}

	// The down script reverts everything the up script made.
	if _, err := pool.Exec(ctx, m.SQL(postgres.DirectionDown)); err != nil {
		t.Fatalf("apply printed down script: %v", err)
	}
	if got := applied(t, m); len(got) != 0 || tableExists(t, pool, byHand, "outbox_events") {
		t.Fatalf("after the down script: applied %v", got)
	}
}

const (
	schemaDocPath  = "../docs/SCHEMA.md"
	schemaDocBegin = "<!-- BEGIN GENERATED: postgres.MigrationSQL(nil) -->\n"
	schemaDocEnd   = "<!-- END GENERATED -->\n"
)

// TestSchemaDocIsCurrent keeps the SQL printed in docs/SCHEMA.md equal to
// what the code applies. Run with -update after changing a migration.
func TestSchemaDocIsCurrent(t *testing.T) {
	script, err := postgres.MigrationSQL(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := schemaDocBegin + "```sql\n" + script + "```\n" + schemaDocEnd
	raw, err := os.ReadFile(schemaDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, schemaDocBegin), strings.Index(doc, schemaDocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the generated-section markers", schemaDocPath)
	}
	current := doc[i : j+len(schemaDocEnd)]
	if current == want {
		return
	}
	if !*update {
		t.Fatalf("%s is out of date with the migrations: run go test ./postgres -run TestSchemaDocIsCurrent -update", schemaDocPath)
	}
	if err := os.WriteFile(schemaDocPath, []byte(doc[:i]+want+doc[j+len(schemaDocEnd):]), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaDocExamplesWork runs the SQL that docs/SCHEMA.md gives services
// in other languages, and relays what it wrote.
func TestSchemaDocExamplesWork(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	raw, err := os.ReadFile(schemaDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## Writing from other languages")
	end := strings.Index(doc[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("docs/SCHEMA.md lacks its section on other languages")
	}
	section := doc[start : start+1+end]
	var blocks []string
	for _, part := range strings.Split(section, "```sql\n")[1:] {
		blocks = append(blocks, part[:strings.Index(part, "```")])
	}
	if len(blocks) != 2 {
		t.Fatalf("found %d SQL examples, want 2", len(blocks))
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{db.schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET search_path") //nolint:errcheck // best effort before release
	for _, b := range blocks {
		if _, err := conn.Exec(ctx, b); err != nil {
			t.Fatalf("example failed: %v\n%s", err, b)
		}
	}
	s := newStore(t, db, postgres.Config{Ordering: true})
	got := claimAll(t, s, nil)
	if len(got) != 2 || got[0].Type != "order.confirmed" || got[1].Type != "order.shipped" || got[1].Sequence != 1 || got[1].AggregateID != "42" {
		t.Fatalf("relayed %+v", got)
	}
}
