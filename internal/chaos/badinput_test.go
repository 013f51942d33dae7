package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Bad input the other packages' tests cover, and where:
//
//	schema and table names with injection attempts  postgres TestInvalidIdentifiersAreRefused
//	missing type, nil ID, non-JSON, oversized        postgres TestInvalidEventsWriteNothing, core TestEventValidation
//	malformed CloudEvents headers                    core TestEventFromMalformedHeaders, qstash TestReceiverRefusesWithoutEffect,
//	                                                 qstash FuzzDecodeHeaders, chaos FuzzEventFromCloudEventHeaders
//	unknown event types (retried for a window, then  core TestMuxUnknownTypePolicies, TestMuxRetriesUnknownTypesByDefault,
//	permanent; dead-lettered at once here)           qstash TestReceiverErrorOutcomes
//	panicking handlers                               core TestRecoverTurnsPanicIntoError, qstash TestReceiverErrorOutcomes
//	the signature matrix                             qstash TestVerifyMatrix, TestReceiverSignatureMatrix, FuzzVerify
//
// TestBadInputEndToEnd adds the whole path: what a real relay, qstashdev
// and consumer make of bad events, including rows other services write with
// plain SQL, which no Go validation has seen.

// TestBadInputEndToEnd writes healthy events around bad ones and checks that
// each bad one ends in a dead letter (the outbox's, or QStash's DLQ) without
// an effect, within its retry budget, while every healthy one is applied
// exactly once and no process dies.
func TestBadInputEndToEnd(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.startConsumer()
	ctx := context.Background()
	healthy := orderEvents(t, 60, "order.placed", "")
	if err := e.addEvents(ctx, kindOK, healthy[:30]...); err != nil {
		t.Fatal(err)
	}
	unknown := orderEvents(t, 1, "chaos.unknown", "")[0]
	panics := orderEvents(t, 1, "chaos.panic", "")[0]
	if err := e.addEvents(ctx, "bad", unknown, panics); err != nil {
		t.Fatal(err)
	}
	// Rows another service could write with plain SQL: only id, event_type
	// and payload are required, and the database checks little.
	type sqlRow struct{ name, id, typ, payload string }
	rows := []sqlRow{
		{"empty type", core.NewID().String(), "", `{}`},
		{"nil UUID", "00000000-0000-0000-0000-000000000000", "order.placed", `{}`},
		{"payload over QStash's 1 MiB", core.NewID().String(), "order.placed", `"` + strings.Repeat("x", 1536<<10) + `"`},
		{"line break in the type", core.NewID().String(), "order\nplaced", `{}`},
		{"type over 255 bytes", core.NewID().String(), strings.Repeat("t", 300), `{}`},
		{"non-string header values", core.NewID().String(), "order.placed", `{}`},
	}
	for _, r := range rows {
		kind := "bad"
		headers := `{}`
		if r.name == "non-string header values" {
			kind, headers = kindOK, `{"n": 1, "ok": true, "x-tenant": "t1"}` // still relayed and applied
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.table("orders")+` (event_id, kind) VALUES ($1, $2)`, r.id, kind); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.table("outbox_events")+` (id, event_type, payload, headers) VALUES ($1, $2, $3, $4)`,
			r.id, r.typ, r.payload, headers); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	if err := e.addEvents(ctx, kindOK, healthy[30:]...); err != nil {
		t.Fatal(err)
	}
	const maxAttempts, qstashRetries = 4, 2
	e.startRelay(0, func(int) []string {
		return []string{"-qstash-retries", "2", "-max-attempts", "4", "-backoff", "50ms", "-max-backoff", "100ms", "-lease", "2s", "-publish-timeout", "1s"}
	})
	waitSettled(t, e)

	// Where each bad event ended.
	dlq := map[string]int{} // event ID → status of QStash's last attempt
	for _, d := range e.qs.DLQ() {
		if d.Message.Retried > qstashRetries {
			t.Errorf("QStash tried %s %d times, more than 1+Retries", eventIDOf(d.Message), d.Message.Retried+1)
		}
		dlq[eventIDOf(d.Message)] = d.ResponseStatus
	}
	type end struct {
		attempts        int
		published, dead bool
		lastError       string
	}
	endOf := func(id string) end {
		var x end
		if err := e.pool.QueryRow(ctx, `SELECT attempts, published_at IS NOT NULL, dead_at IS NOT NULL, COALESCE(last_error, '') FROM `+
			e.table("outbox_events")+` WHERE id = $1`, id).Scan(&x.attempts, &x.published, &x.dead, &x.lastError); err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
		if x.attempts > maxAttempts {
			t.Errorf("event %s claimed %d times, more than MaxAttempts (%d)", id, x.attempts, maxAttempts)
		}
		return x
	}
	for _, c := range []struct {
		name, id string
		status   int // QStash DLQ status; 0: dead-lettered in the outbox instead
	}{
		{"unknown type", unknown.ID.String(), 489}, // permanent at once
		{"panicking handler", panics.ID.String(), 500},
		{"empty type", rows[0].id, 0}, // the relay validates claimed rows
		{"nil UUID", rows[1].id, 0},
		{"payload over QStash's 1 MiB", rows[2].id, 0},
		{"line break in the type", rows[3].id, 0},
		{"type over 255 bytes", rows[4].id, 0},
	} {
		x := endOf(c.id)
		switch {
		case c.status == 0 && (!x.dead || x.published):
			t.Errorf("%s: outbox published=%v dead=%v (%q); want dead-lettered in the outbox", c.name, x.published, x.dead, x.lastError)
		case c.status != 0 && (!x.published || dlq[c.id] != c.status):
			t.Errorf("%s: outbox published=%v, QStash DLQ status %d; want published and dead-lettered by QStash with %d", c.name, x.published, dlq[c.id], c.status)
		}
	}
	if st := e.consumer.stats(); st.starts != 1 {
		t.Errorf("the consumer was started %d times: a bad event crashed it", st.starts)
	}
	if st := e.relays[0].stats(); st.starts != 1 {
		t.Errorf("the relay was started %d times: a bad event crashed it", st.starts)
	}
	if n := e.settleFailed.Load(); n != 0 {
		t.Errorf("%d batches could not be settled", n)
	}
}

// TestInfiniteTimestampRowDoesNotStallClaims: timestamptz accepts
// 'infinity', so a plain-SQL writer can store created_at = 'infinity' (or
// available_at = '-infinity'). The
// claim's UPDATE leases the row, then reading it into a time.Time fails, so
// the claim returns an error and no event: the row is due again at every
// lease expiry and sits at the head of the order, and with it every event
// the relay would claim beside it waits forever.
func TestInfiniteTimestampRowDoesNotStallClaims(t *testing.T) {
	pool := pgtest.Pool(t, 2)
	schema := pgtest.Schema(t, pool, "chaosinf")
	ctx := context.Background()
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	healthy := core.NewID()
	// Either the table refuses the row, or the store relays it like any
	// other; what must not happen is a claim that fails for the healthy
	// event beside it.
	_, insertErr := pool.Exec(ctx, `INSERT INTO "`+schema+`".outbox_events (id, event_type, payload, created_at, available_at) VALUES
		($1, 'a', '{}', 'infinity', now()), ($2, 'a', '{}', now(), '-infinity')`, core.NewID().String(), core.NewID().String())
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`".outbox_events (id, event_type, payload) VALUES ($1, 'b', '{}')`, healthy.String()); err != nil {
		t.Fatal(err)
	}
	b, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("claim beside a created_at = 'infinity' row (insert: %v): %v", insertErr, err)
	}
	found := false
	for _, e := range b.Events {
		found = found || e.ID == healthy
	}
	if !found {
		t.Fatalf("the healthy event was not claimed: %d events", len(b.Events))
	}
}

// TestNilUUIDRowSettles: the outbox's id column accepts the nil UUID, so a
// plain-SQL writer can store one. Its batch must settle like any other;
// refusing it would leave every event claimed with it to be republished
// each time the lease expires, forever, past MaxAttempts.
func TestNilUUIDRowSettles(t *testing.T) {
	pool := pgtest.Pool(t, 2)
	schema := pgtest.Schema(t, pool, "chaosnil")
	ctx := context.Background()
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`".outbox_events (id, event_type, payload) VALUES
		('00000000-0000-0000-0000-000000000000', 'a', '{}'), ($1, 'b', '{}')`, core.NewID().String()); err != nil {
		t.Fatal(err)
	}
	b, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
	if err != nil || len(b.Events) != 2 {
		t.Fatalf("claim: %d events, %v", len(b.Events), err)
	}
	out := make([]core.Outcome, len(b.Events))
	for i, ev := range b.Events {
		out[i] = core.Outcome{ID: ev.ID, Kind: core.Published}
	}
	if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil {
		t.Fatalf("settle a batch holding a nil-UUID row: %v", err)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".outbox_events WHERE published_at IS NULL`).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("%d events still pending (%v)", pending, err)
	}
}
