package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

func TestSqlcQueriesAndEventsShareTheTransaction(t *testing.T) {
	pool := pgtest.Pool(t, 1)
	schema := pgtest.NewSchemaName("sqlc")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, pgtest.URL(), schema, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
}

// sqlcModule is the sqlc that generated pgxdb and sqldb; keep it in step
// with the "versions" line of their files and the command in sqlc.yaml.
const sqlcModule = "github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1"

// sqlcDiff runs `sqlc diff` in dir: it exits non-zero, printing the
// difference, when the generated files there are not what sqlc generates
// from sqlc.yaml, schema.sql and query.sql. The first run builds sqlc
// (about 75 s on 2 cores with an empty build cache; cgo, for its
// PostgreSQL parser), later ones take a second.
func sqlcDiff(t *testing.T, dir string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", sqlcModule, "diff")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestGeneratedCodeIsSqlcs: pgxdb and sqldb are committed only because
// this test regenerates them and fails on any difference.
func TestGeneratedCodeIsSqlcs(t *testing.T) {
	if out, err := sqlcDiff(t, "."); err != nil {
		t.Fatalf("pgxdb or sqldb differ from what sqlc generates (%v): run `go run %s generate` in examples/sqlc\n%s", err, sqlcModule, out)
	}

	// The check can fail: the same files with one generated line changed.
	dir := t.TempDir()
	for _, f := range []string{"sqlc.yaml", "schema.sql", "query.sql", "pgxdb/db.go", "pgxdb/models.go", "pgxdb/query.sql.go", "sqldb/db.go", "sqldb/models.go", "sqldb/query.sql.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if f == "sqldb/models.go" {
			b = []byte(strings.Replace(string(b), "Customer   string", "Customer   []byte", 1))
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := sqlcDiff(t, dir); err == nil || !strings.Contains(out, "Customer") {
		t.Fatalf("sqlc diff passed an edited sqldb/models.go (err %v):\n%s", err, out)
	}
}
