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

func TestQuickstartDeliversEveryOrderOnce(t *testing.T) {
	pool := pgtest.Pool(t, 2)
	schema := pgtest.NewSchemaName("quickstart")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	var out bytes.Buffer
	sum, err := run(context.Background(), options{
		DatabaseURL: pgtest.URL(), Schema: schema, Orders: 120, FailEvery: 5, Replay: 10, Timeout: time.Minute, Out: &out,
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !sum.ok() {
		t.Fatalf("summary not ok: %s\n%s", sum.problem(), out.String())
	}
	// 24 orders are multiples of 5; one of them (60) is the poison order,
	// refused for good before the transient failure.
	if sum.Applied != 119 || sum.DeadLettered != 1 || sum.Duplicates != 10 || sum.RetriedOK != 23 || sum.DoubleApplied != 0 {
		t.Fatalf("summary = %+v, want 119 applied, 1 dead-lettered, 10 duplicates, 23 retried", sum)
	}
	if !strings.Contains(out.String(), "lost                     0") {
		t.Fatalf("summary does not report zero lost:\n%s", out.String())
	}
}

func TestQuickstartExplainsUnreachableDatabase(t *testing.T) {
	_, err := run(context.Background(), options{DatabaseURL: "postgres://postgres:secret@127.0.0.1:1/test", Schema: "x", Orders: 1, Timeout: 10 * time.Second, Out: &bytes.Buffer{}})
	if err == nil {
		t.Fatal("run succeeded without a database")
	}
	msg := err.Error()
	if !strings.Contains(msg, "cannot reach PostgreSQL") || !strings.Contains(msg, "DATABASE_URL") || strings.Contains(msg, "secret") || strings.Contains(msg, "\n") {
		t.Fatalf("unhelpful error: %q", msg)
	}
}

// Through PgBouncer in transaction mode (CI runs it on 127.0.0.1:6432),
// with the wake-ups past it: every order once, nothing lost.
func TestQuickstartThroughPgBouncer(t *testing.T) {
	pgtest.RequireBouncer(t)
	pool := pgtest.Pool(t, 2)
	schema := pgtest.NewSchemaName("quickstart_bouncer")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	var out bytes.Buffer
	sum, err := run(context.Background(), options{
		DatabaseURL: pgtest.BouncerURL(), WakeupURL: pgtest.URL(),
		Schema: schema, Orders: 120, FailEvery: 5, Replay: 10, Timeout: time.Minute, Out: &out,
	})
	if err != nil {
		t.Fatalf("run through PgBouncer: %v\n%s", err, out.String())
	}
	if !sum.ok() || sum.Applied != 119 || sum.DoubleApplied != 0 || sum.Duplicates != 10 {
		t.Fatalf("summary through PgBouncer = %+v (%s)\n%s", sum, sum.problem(), out.String())
	}
	if !strings.Contains(out.String(), "wake-ups:") {
		t.Fatalf("the run does not show its wake-up URL:\n%s", out.String())
	}
}
