package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDatabaseSQLAppliesEveryOrderOnce(t *testing.T) {
	pool := pgtest.Pool(t, 1)
	schema := pgtest.NewSchemaName("database_sql")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	var out bytes.Buffer
	err := run(context.Background(), options{DatabaseURL: pgtest.URL(), Schema: schema, Orders: 30, Replay: 4, Timeout: time.Minute, Out: &out})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"a rolled-back one left no row and no event", "invoices 30 of 30 orders, applied twice 0, replayed 4 (suppressed 4)", "OK:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDatabaseSQLExplainsUnreachableDatabase(t *testing.T) {
	err := run(context.Background(), options{DatabaseURL: "postgres://postgres:secret@127.0.0.1:1/test?sslmode=disable", Schema: "x", Orders: 1, Timeout: 10 * time.Second, Out: &bytes.Buffer{}})
	if err == nil {
		t.Fatal("run succeeded without a database")
	}
	if msg := err.Error(); !strings.Contains(msg, "cannot reach PostgreSQL") || strings.Contains(msg, "secret") {
		t.Fatalf("unhelpful error: %q", msg)
	}
}
