package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// TestInboxTableCommands: an inbox table is an outbox table, so status,
// dlq (list, show, replay), replay and prune work on it with --table,
// while the default table is left alone.
func TestInboxTableCommands(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "outboxctl_inbox")
	ctx := ctxT(t)
	for _, table := range []string{"outbox_events", "billing_inbox"} {
		if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema, Table: table}); err != nil {
			t.Fatalf("migrate %s: %v", table, err)
		}
	}
	t.Cleanup(func() {
		for _, table := range []string{"outbox_events", "billing_inbox"} {
			_, _ = pool.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pgx.Identifier{"outboxkit." + schema + "." + table}.Sanitize())
		}
	})
	var fixed atomic.Bool
	var applied atomic.Int32
	in, err := postgres.NewInbox(pool, &postgres.InboxConfig{
		Consumer: "billing",
		Store:    postgres.Config{Schema: schema, Wakeup: postgres.WakeupPoll},
		Handler: core.HandlerFunc(func(_ context.Context, e core.Event) error {
			if e.Type == "poison" && !fixed.Load() {
				return core.Permanent(errors.New("cannot apply: unknown customer"))
			}
			applied.Add(1)
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ok1, ok2, poison := event(t, "invoice.sent", "invoice", "1"), event(t, "invoice.sent", "invoice", "2"), event(t, "poison", "invoice", "3")
	if _, err := in.Accept(ctx, pool, ok1, ok2, poison); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Relay().Drain(ctx); err != nil {
		t.Fatal(err)
	}
	args := func(a ...string) []string { return append(a, "--schema", schema, "--table", in.Table()) }

	r := cli(t, env(), args("status", "--json")...)
	wantOK(t, r)
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.Table != "billing_inbox" || st.Pending != 0 || st.DeadLettered != 1 {
		t.Fatalf("status of the inbox = %+v, want billing_inbox with 1 dead letter", st)
	}
	r = cli(t, env(), "status", "--json", "--schema", schema)
	wantOK(t, r)
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.DeadLettered != 0 {
		t.Fatalf("status of the default table = %+v (%v): the inbox's dead letter must not show there", st, err)
	}

	r = cli(t, env(), args("dlq", "list")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, poison.ID.String()) || !strings.Contains(r.stdout, "unknown customer") || strings.Contains(r.stdout, ok1.ID.String()) {
		t.Fatalf("dlq list of the inbox:\n%s", r.stdout)
	}
	r = cli(t, env(), args("dlq", "show", "--id", poison.ID.String())...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "dead-lettered") || !strings.Contains(r.stdout, "poison") {
		t.Fatalf("dlq show of the inbox's dead letter:\n%s", r.stdout)
	}

	// Fixed, replayed from the dead-letter queue: the worker applies it.
	fixed.Store(true)
	r = cli(t, env(), args("dlq", "replay", "--id", poison.ID.String())...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "replayed 1 dead-lettered") {
		t.Fatalf("dlq replay: %q", r.stdout)
	}
	if _, err := in.Relay().Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := applied.Load(); n != 3 {
		t.Fatalf("%d effects after the replay, want 3", n)
	}

	// replay of a published inbox event runs it through the Deduper
	// again: already applied, so no second effect.
	r = cli(t, env(), args("replay", "--id", ok1.ID.String())...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "replayed 1 ") {
		t.Fatalf("replay: %q", r.stdout)
	}
	if _, err := in.Relay().Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := applied.Load(); n != 3 {
		t.Fatalf("%d effects after replaying an applied event, want still 3 (the Deduper drops it)", n)
	}

	// prune deletes the inbox's published rows and, with --processed, the
	// workers' dedupe records in billing_inbox_processed.
	r = cli(t, env(), args("prune", "--older-than", "0s", "--processed", "--yes")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "pruned 3 event(s)") {
		t.Fatalf("prune of the inbox: %q", r.stdout)
	}
	var left, records int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+pgx.Identifier{schema, "billing_inbox"}.Sanitize()+"), (SELECT count(*) FROM "+
		pgx.Identifier{schema, "billing_inbox_processed"}.Sanitize()+")").Scan(&left, &records); err != nil {
		t.Fatal(err)
	}
	if left != 0 || records != 0 {
		t.Fatalf("after prune: %d inbox rows, %d processed records; want none", left, records)
	}
}
