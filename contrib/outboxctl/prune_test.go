package main

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

func TestPrune(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	var oldPublished []core.Event
	for range 25 {
		oldPublished = append(oldPublished, event(t, "old", "", ""))
	}
	recent, dead := event(t, "recent", "", ""), event(t, "dead", "", "")
	o.add(t, append(oldPublished, recent, dead)...)
	o.settle(t, func(e core.Event) core.OutcomeKind {
		if e.ID == dead.ID {
			return core.DeadLettered
		}
		return core.Published
	}, "boom")
	o.exec(t, "UPDATE "+o.table()+" SET published_at = now() - interval '3 days' WHERE event_type = 'old'")
	o.exec(t, "UPDATE "+o.table()+" SET dead_at = now() - interval '30 days' WHERE event_type = 'dead'")
	pending := o.insertSQL(t, 1, "pending")
	o.exec(t, "UPDATE "+o.table()+" SET created_at = now() - interval '30 days' WHERE id = $1", pending[0].String())

	// --dry-run counts and deletes nothing.
	r := cli(t, env(), o.args("prune", "--older-than", "2d", "--dry-run")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "would prune 25 event(s)") || o.count(t, "true") != 28 {
		t.Fatalf("prune --dry-run: %q, %d rows", r.stdout, o.count(t, "true"))
	}

	// In small batches, with plain progress lines (stdout is not a
	// terminal) and a summary.
	r = cli(t, env(), o.args("prune", "--older-than", "2d", "--batch-size", "10")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "pruned 25 event(s) published before") || strings.Contains(r.stdout, "\r") {
		t.Errorf("prune output: %q", r.stdout)
	}
	if n := o.count(t, "event_type = 'old'"); n != 0 {
		t.Errorf("%d old published events left", n)
	}
	// Recent published, dead-lettered (however old) and pending events stay.
	for _, id := range []string{recent.ID.String(), dead.ID.String(), pending[0].String()} {
		if o.count(t, "id = $1", id) != 1 {
			t.Errorf("prune deleted %s", id)
		}
	}
	r = cli(t, env(), o.args("prune", "--older-than", "2d")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "pruned 0 ") {
		t.Errorf("second prune: %q", r.stdout)
	}
}

func TestPruneProcessed(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	d, err := postgres.NewDeduper(o.pool, &postgres.DeduperConfig{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	var old, fresh []core.ID
	for i := range 12 {
		id := core.NewID()
		if _, err := d.Once(ctxT(t), core.DedupeKey{Consumer: "billing", EventID: id}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if i < 8 {
			old = append(old, id)
		} else {
			fresh = append(fresh, id)
		}
	}
	processed := `"` + o.schema + `".outbox_events_processed`
	for _, id := range old {
		o.exec(t, "UPDATE "+processed+" SET processed_at = now() - interval '40 days' WHERE event_id = $1", id.String())
	}

	// Shorter than the outbox retention: allowed, with a warning.
	r := cli(t, env(), o.args("prune", "--older-than", "30d", "--processed", "--processed-older-than", "7d")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "pruned 8 processed-event record(s)") || !strings.Contains(r.stderr, "warning") {
		t.Errorf("prune --processed: stdout %q stderr %q", r.stdout, r.stderr)
	}
	var left int
	if err := o.pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+processed).Scan(&left); err != nil || left != len(fresh) {
		t.Errorf("%d processed records left (%v), want %d", left, err, len(fresh))
	}

	r = cli(t, env(), o.args("prune", "--older-than", "30d", "--processed-older-than", "7d")...)
	wantOneLineError(t, r, exitError, "--processed")
}

// TestPruneRefusesOverflowingAge: a day count past what a time.Duration
// holds used to wrap around, so "213504d1h" (centuries) pruned everything
// published more than 1h25m ago and "106752d" turned negative, a cutoff in
// the future. Both must be refused, deleting nothing.
func TestPruneRefusesOverflowingAge(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	e := event(t, "old", "", "")
	o.add(t, e)
	o.settle(t, func(core.Event) core.OutcomeKind { return core.Published }, "")
	o.exec(t, "UPDATE "+o.table()+" SET published_at = now() - interval '2 hours'")
	for _, age := range []string{"213504d1h", "106752d", "-1h"} {
		r := cli(t, env(), o.args("prune", "--older-than", age)...)
		wantOneLineError(t, r, exitError, "--older-than", age)
		if n := o.count(t, "true"); n != 1 {
			t.Fatalf("prune --older-than %s deleted events: %d left", age, n)
		}
	}
	r := cli(t, env(), o.args("prune", "--older-than", "213504d1h")...)
	wantOneLineError(t, r, exitError, "out of range")
}

// TestPruneZeroAge: --older-than 0s used to be reported as a missing flag.
// Zero is a real value, and the most destructive one: every published
// event, including those published this instant, which nothing could then
// replay. It is refused unless --yes confirms it.
func TestPruneZeroAge(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	published, dead := event(t, "published", "", ""), event(t, "dead", "", "")
	o.add(t, published, dead)
	o.settle(t, func(e core.Event) core.OutcomeKind {
		if e.ID == dead.ID {
			return core.DeadLettered
		}
		return core.Published
	}, "boom")
	o.insertSQL(t, 1, "pending")

	r := cli(t, env(), o.args("prune")...)
	wantOneLineError(t, r, exitError, "prune needs --older-than")

	for _, age := range []string{"0s", "0", "0d"} {
		r = cli(t, env(), o.args("prune", "--older-than", age)...)
		wantOneLineError(t, r, exitError, "--older-than 0", "every published event", "--yes")
		if strings.Contains(r.stderr, "needs --older-than") {
			t.Errorf("--older-than %s is reported as missing: %s", age, r.stderr)
		}
	}
	r = cli(t, env(), o.args("prune", "--older-than", "1d", "--processed", "--processed-older-than", "0s")...)
	wantOneLineError(t, r, exitError, "--processed-older-than 0", "--yes")
	if n := o.count(t, "true"); n != 3 {
		t.Fatalf("a refused prune deleted events: %d left", n)
	}

	// --dry-run deletes nothing, so it needs no confirmation.
	r = cli(t, env(), o.args("prune", "--older-than", "0s", "--dry-run")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "would prune 1 event(s)") {
		t.Errorf("prune --older-than 0s --dry-run: %q", r.stdout)
	}

	r = cli(t, env(), o.args("prune", "--older-than", "0s", "--yes")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "pruned 1 event(s)") || o.count(t, "id = $1", published.ID.String()) != 0 {
		t.Errorf("prune --older-than 0s --yes: %q", r.stdout)
	}
	if n := o.count(t, "true"); n != 2 {
		t.Errorf("prune --older-than 0s --yes left %d events, want the dead and the pending one", n)
	}
}
