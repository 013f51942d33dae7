package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// catalog describes what a schema holds (tables, columns, indexes,
// constraints, recorded migration versions), with the schema's name
// replaced by "S" so two schemas can be compared.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' null=' || is_nullable || ' default=' || coalesce(column_default, '') || ' identity=' || is_identity
		 FROM information_schema.columns WHERE table_schema = $1`,
		`SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = $1`,
		`SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = to_regnamespace(quote_ident($1))`,
		`SELECT 'table ' || c.relname || ' ' || coalesce(array_to_string(c.reloptions, ','), '') FROM pg_class c WHERE c.relnamespace = to_regnamespace(quote_ident($1)) AND c.relkind = 'r'`,
	} {
		rows, err := pool.Query(ctxT(t), q, schema)
		if err != nil {
			t.Fatalf("catalog: %v", err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			s = strings.ReplaceAll(s, `"`+schema+`"`, "S")
			out = append(out, strings.ReplaceAll(s, schema, "S"))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := pool.Query(ctxT(t), fmt.Sprintf(`SELECT target || ' ' || version || ' ' || name FROM %q.outboxkit_migrations`, schema))
	if err != nil {
		t.Fatalf("read recorded versions: %v", err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, "version "+s)
	}
	slices.Sort(out)
	return out
}

// TestMigratePrintMatchesMigrate applies the printed script by hand to one
// schema and runs migrate on another: the two must end up identical, and
// migrate must see the hand-applied script as applied.
func TestMigratePrintMatchesMigrate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	applied := pgtest.Schema(t, pool, "outboxctl_mig")
	printed := pgtest.Schema(t, pool, "outboxctl_print")

	r := cli(t, env(), "migrate", "--schema", applied)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "applied 001_outbox, 002_ordering, 003_processed") {
		t.Errorf("migrate: %q", r.stdout)
	}
	r = cli(t, env(), "migrate", "--schema", applied)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already up to date") {
		t.Errorf("second migrate: %q", r.stdout)
	}

	// --print needs no database at all.
	r = cli(t, env("DATABASE_URL=postgres://nobody@127.0.0.1:1/none"), "migrate", "--print", "--schema", printed)
	wantOK(t, r)
	script := r.stdout
	if !strings.Contains(script, "BEGIN;") || !strings.Contains(script, `"`+printed+`"`) {
		t.Fatalf("migrate --print:\n%s", script)
	}
	conn, err := pool.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// The simple protocol runs a multi-statement script, as psql -f does.
	_, err = conn.Conn().PgConn().Exec(ctxT(t), script).ReadAll()
	conn.Release()
	if err != nil {
		t.Fatalf("apply the printed script: %v", err)
	}

	a, b := catalog(t, pool, applied), catalog(t, pool, printed)
	if !slices.Equal(a, b) {
		t.Fatalf("migrate and the printed script differ:\nmigrate:\n  %s\nprinted:\n  %s", strings.Join(a, "\n  "), strings.Join(b, "\n  "))
	}
	if len(a) < 20 {
		t.Fatalf("catalog suspiciously small: %v", a)
	}

	r = cli(t, env(), "migrate", "status", "--json", "--schema", printed)
	wantOK(t, r)
	var st struct {
		Migrations []struct {
			Version int
			Applied bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Migrations) != len(knownMigrations(t)) {
		t.Fatalf("migrate status --json: %v\n%s", err, r.stdout)
	}
	for _, m := range st.Migrations {
		if !m.Applied {
			t.Errorf("migration %d of the printed script is not seen as applied", m.Version)
		}
	}
	r = cli(t, env(), "migrate", "--schema", printed)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already up to date") {
		t.Errorf("migrate after the printed script: %q", r.stdout)
	}
}

func TestMigrateStatusAndDown(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "outboxctl_down")

	known := knownMigrations(t)
	last := known[len(known)-1]
	var reverted []string // what down --to 1 reverts, newest first
	for i := len(known) - 1; i >= 1; i-- {
		reverted = append(reverted, fmt.Sprintf("%03d_%s", known[i].Version, known[i].Name))
	}

	r := cli(t, env(), "migrate", "status", "--schema", schema)
	wantOK(t, r)
	if strings.Count(r.stdout, "pending") != len(known) {
		t.Errorf("status before migrate:\n%s", r.stdout)
	}
	wantOK(t, cli(t, env(), "migrate", "--schema", schema))
	r = cli(t, env(), "migrate", "status", "--schema", schema)
	wantOK(t, r)
	if strings.Contains(r.stdout, "pending") || !strings.Contains(r.stdout, fmt.Sprintf("%03d  ", last.Version)) {
		t.Errorf("status after migrate:\n%s", r.stdout)
	}

	r = cli(t, env(), "migrate", "--print", "--down", "--schema", schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "DROP TABLE") {
		t.Errorf("migrate --print --down:\n%s", r.stdout)
	}

	r = cli(t, env(), "migrate", "down", "--to", "1", "--yes", "--schema", schema)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "reverted "+strings.Join(reverted, ", ")) {
		t.Errorf("migrate down --to 1: %q", r.stdout)
	}
	r = cli(t, env(), "migrate", "down", "--to", "0", "--yes", "--schema", schema)
	wantOK(t, r)
	var tables int
	if err := pool.QueryRow(ctxT(t), "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'outbox_events%'", schema).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("%d outbox tables left after down --to 0 (%v)", tables, err)
	}
	r = cli(t, env(), "status", "--schema", schema)
	wantOneLineError(t, r, exitError, "outboxctl migrate")
}

// knownMigrations is the migration list this build embeds, so the tests
// follow it as migrations are added.
func knownMigrations(t *testing.T) []postgres.Migration {
	t.Helper()
	m, err := postgres.NewMigrator((*pgxpool.Pool)(nil), &postgres.MigrateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ms := m.Migrations()
	if len(ms) < 2 {
		t.Fatalf("only %d migrations embedded", len(ms))
	}
	return ms
}
