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

func TestOrderedConsumerAppliesEveryStatusInOrder(t *testing.T) {
	pool := pgtest.Pool(t, 2)
	schema := pgtest.NewSchemaName("ordered")
	t.Cleanup(func() { _ = dropSchema(context.Background(), pool, schema) })
	var out bytes.Buffer
	sum, err := run(context.Background(), options{
		DatabaseURL: pgtest.URL(), Schema: schema, Orders: 100, Writers: 4, Concurrency: 8,
		FailEvery: 7, LoseAckEvery: 25, Replay: 10, Timeout: time.Minute, Out: &out,
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !sum.ok() {
		t.Fatalf("summary not ok: %s\n%s", sum.problem(), out.String())
	}
	// 400 events: 57 are multiples of 7 (each fails its first handler run
	// once), 16 are 12 more than a multiple of 25 (each loses one
	// acknowledgement).
	if sum.Applied != 400 || sum.Failures != 57 || sum.LostAcks != 16 || sum.Replayed != 10 {
		t.Fatalf("summary = %+v, want 400 applied, 57 handler failures, 16 lost acknowledgements, 10 replayed", sum)
	}
	// The point of the example: deliveries really arrived early and stale,
	// and were held back or dropped.
	if sum.Gaps == 0 {
		t.Fatalf("no delivery arrived before its predecessor, so ordering was not exercised:\n%s", out.String())
	}
	if sum.Stale < int64(sum.LostAcks+sum.Replayed) {
		t.Fatalf("%d stale deliveries, want at least %d (one per lost acknowledgement and replay):\n%s", sum.Stale, sum.LostAcks+sum.Replayed, out.String())
	}
	for _, line := range []string{"orders not delivered            0", "applied out of order            0", "dead-lettered                   0"} {
		if !strings.Contains(out.String(), line) {
			t.Fatalf("summary lacks %q:\n%s", line, out.String())
		}
	}
}

// The invariants are read from the consumer's tables; this checks the
// reading catches what it must.
func TestCheckFindsStatusesOutOfOrder(t *testing.T) {
	pool := pgtest.Pool(t, 2)
	schema := pgtest.NewSchemaName("ordered_check")
	ctx := context.Background()
	t.Cleanup(func() { _ = dropSchema(ctx, pool, schema) })
	if err := setupSchema(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	track := newTracking(schema)
	_, err := pool.Exec(ctx, `INSERT INTO `+track.table+` (order_id, status, total_cents) VALUES (1, 'delivered', 1), (2, 'paid', 1);
		INSERT INTO `+track.log+` (order_id, sequence, status) VALUES
		(1, 1, 'placed'), (1, 2, 'paid'), (1, 3, 'shipped'), (1, 4, 'delivered'),
		(2, 1, 'placed'), (2, 3, 'shipped'), (2, 2, 'paid'), (2, 2, 'paid')`)
	if err != nil {
		t.Fatal(err)
	}
	sum := summary{Orders: 2, Events: 8}
	if err := track.check(ctx, pool, &sum); err != nil {
		t.Fatal(err)
	}
	// Order 2: shipped after placed, paid after shipped, paid again.
	if sum.Applied != 8 || sum.OutOfOrder != 3 || sum.NotDelivered != 1 || sum.ok() {
		t.Fatalf("check = %+v (ok %v), want 8 applied, 3 out of order, 1 not delivered, not ok", sum, sum.ok())
	}
}

func TestOrderedConsumerExplainsUnreachableDatabase(t *testing.T) {
	_, err := run(context.Background(), options{DatabaseURL: "postgres://postgres:secret@127.0.0.1:1/test", Schema: "x", Orders: 1, Timeout: 10 * time.Second, Out: &bytes.Buffer{}})
	if err == nil {
		t.Fatal("run succeeded without a database")
	}
	msg := err.Error()
	if !strings.Contains(msg, "cannot reach PostgreSQL") || !strings.Contains(msg, "DATABASE_URL") || strings.Contains(msg, "secret") || strings.Contains(msg, "\n") {
		t.Fatalf("unhelpful error: %q", msg)
	}
}
