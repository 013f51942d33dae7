package main

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// TestPrunePartitioned: on a daily-partitioned outbox, prune drops the
// retired partition (its dead letters moved to the default partition
// first), creates the missing partitions ahead, deletes in batches the
// old published event the default partition holds, and keeps the rest;
// --dry-run says so and changes nothing. Processed-record partitions go
// only with --processed.
func TestPrunePartitioned(t *testing.T) {
	t.Parallel()
	o := newPartitionedOutbox(t, postgres.PartitionDaily)
	const published, dead = 4, 2
	today := time.Now().UTC().Truncate(24 * time.Hour)
	retired, removed := retiredDay(t, o, published, dead)
	retiredProcessed := strings.Replace(retired, "outbox_events_p", "outbox_events_processed_p", 1)
	// Created 40 days ago, where no partition is: the default partition.
	o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, created_at, published_at) VALUES (gen_random_uuid(), 'default.published', '{}', now() - interval '40 days', now() - interval '8 days')`)
	o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, published_at) VALUES (gen_random_uuid(), 'recent.published', '{}', now() - interval '1 hour')`)
	o.insertSQL(t, 1, "pending")
	rows := o.count(t, "true")

	r := cli(t, env(), o.args("prune", "--older-than", "7d", "--dry-run")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "would drop the 1 partition(s) whose period ended before") || !strings.Contains(r.stdout, ": "+retired+"\n") ||
		!strings.Contains(r.stdout, "would prune 5 event(s)") {
		t.Errorf("prune --dry-run on the partitioned layout:\n%s", r.stdout)
	}
	if _, ok := o.partitionNames(t)[retired]; !ok || o.count(t, "true") != rows {
		t.Fatalf("prune --dry-run changed something")
	}

	r = cli(t, env(), o.args("prune", "--older-than", "7d")...)
	wantOK(t, r)
	for _, want := range []string{
		"dropped 1 retired partition(s): " + retired + "; 2 dead letter(s) moved to the default partition",
		"pruned 1 event(s) published before",
		"beside the dropped partitions",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("prune on the partitioned layout: no %q in\n%s", want, r.stdout)
		}
	}
	// The two partitions ahead removed are back, unless a day began
	// meanwhile (then the periods ahead moved on too).
	if time.Now().UTC().Truncate(24 * time.Hour).Equal(today) {
		for _, name := range removed {
			if !strings.Contains(r.stdout, name) {
				t.Errorf("prune did not create %s again:\n%s", name, r.stdout)
			}
		}
	}
	parts := o.partitionNames(t)
	if _, ok := parts[retired]; ok {
		t.Errorf("%s is still there", retired)
	}
	if _, ok := parts[retiredProcessed]; !ok {
		t.Errorf("prune without --processed dropped %s", retiredProcessed)
	}
	for what, want := range map[string]int{
		"event_type LIKE 'old.%' AND dead_at IS NULL": 0, "event_type = 'default.published'": 0,
		"dead_at IS NOT NULL": dead, "event_type = 'recent.published'": 1, "event_type = 'pending'": 1,
	} {
		if n := o.count(t, what); n != want {
			t.Errorf("%d rows where %s after prune, want %d", n, what, want)
		}
	}
	if n := countIn(t, o, "outbox_events_default"); n != dead {
		t.Errorf("%d rows in the default partition, want the %d dead letters moved there", n, dead)
	}

	r = cli(t, env(), o.args("prune", "--older-than", "7d", "--processed")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "dropped 1 retired partition(s): "+retiredProcessed+";") || !strings.Contains(r.stdout, "pruned 0 event(s)") {
		t.Errorf("prune --processed on the partitioned layout:\n%s", r.stdout)
	}
	if _, ok := o.partitionNames(t)[retiredProcessed]; ok {
		t.Errorf("%s is still there after prune --processed", retiredProcessed)
	}
	// Replayable still: the moved dead letters keep their IDs.
	r = cli(t, env(), o.args("dlq", "list")...)
	wantOK(t, r)
	if n := strings.Count(r.stdout, "old.dead"); n != dead {
		t.Errorf("dlq list shows %d of the %d moved dead letters:\n%s", n, dead, r.stdout)
	}
}
