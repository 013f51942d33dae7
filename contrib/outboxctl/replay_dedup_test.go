package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// TestReplayWarnsOfTransportDeduplication: the QStash publisher sends the
// event ID as Upstash-Deduplication-Id, and QStash drops a message whose ID
// it saw in the last 10 minutes. A replay of events published that
// recently reported success while QStash dropped every one; it must say
// how many will be dropped and what to do.
func TestReplayWarnsOfTransportDeduplication(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	justNow, hourAgo, dead := event(t, "x", "", ""), event(t, "x", "", ""), event(t, "x", "", "")
	threeMin := event(t, "x", "", "")
	o.add(t, justNow, threeMin, hourAgo, dead)
	settle := func() {
		o.settle(t, func(e core.Event) core.OutcomeKind {
			if e.ID == dead.ID {
				return core.DeadLettered
			}
			return core.Published
		}, "boom")
		o.exec(t, "UPDATE "+o.table()+" SET published_at = now() - interval '3 minutes' WHERE id = $1", threeMin.ID.String())
		o.exec(t, "UPDATE "+o.table()+" SET published_at = now() - interval '1 hour' WHERE id = $1", hourAgo.ID.String())
	}
	settle()

	r := cli(t, env(), o.args("replay", "--all")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "replayed 4 ") {
		t.Fatalf("replay --all: %q", r.stdout)
	}
	for _, want := range []string{"warning", "2 of the 4 replayed event(s)", "published less than 10m ago", "QStash", "Upstash-Deduplication-Id", "drop", "after 20", "without deduplication"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("replay --all warning lacks %q:\n%s", want, r.stderr)
		}
	}
	if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
		t.Errorf("the warning is not one line:\n%s", r.stderr)
	}

	// NATS JetStream drops a repeated Nats-Msg-Id within its stream's
	// duplicate window, 2 minutes unless configured: only justNow.
	settle()
	r = cli(t, env(), o.args("replay", "--all", "--transport", "nats")...)
	wantOK(t, r)
	for _, want := range []string{"1 of the 4 replayed event(s)", "published less than 2m ago", "JetStream", "duplicate window"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("replay --transport nats warning lacks %q:\n%s", want, r.stderr)
		}
	}

	// AMQP does not deduplicate; nothing old enough is no warning either.
	settle()
	r = cli(t, env(), o.args("replay", "--all", "--transport", "amqp")...)
	wantOK(t, r)
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("replay --transport amqp warns: %s", r.stderr)
	}
	settle()
	r = cli(t, env(), o.args("replay", "--id", hourAgo.ID.String()+","+dead.ID.String())...)
	wantOK(t, r)
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("replay of events published long ago warns: %s", r.stderr)
	}

	r = cli(t, env(), o.args("replay", "--all", "--transport", "kafka")...)
	wantOneLineError(t, r, exitError, "--transport", "qstash, nats or amqp")
}

// TestRecentlyPublishedMatchesReplay pins the filter the warning counts with
// to the one postgres.Store.Replay applies: for each filter, the events
// counted are the events replayed.
func TestRecentlyPublishedMatchesReplay(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	a := &app{g: globals{schema: o.schema, table: "outbox_events"}}
	var events []core.Event
	for i, typ := range []string{"order.placed", "order.placed", "invoice.sent", "invoice.sent", "order.paid", "order.paid"} {
		e := event(t, typ, strings.Split(typ, ".")[0], string(rune('1'+i%3)))
		events = append(events, e)
	}
	o.add(t, events...)
	o.exec(t, "UPDATE "+o.table()+" SET created_at = '2024-06-01T00:00:00Z' WHERE id = $1", events[0].ID.String())
	settleAll := func() {
		o.exec(t, "UPDATE "+o.table()+" SET available_at = now(), lease_token = NULL, lease_until = NULL")
		o.settle(t, func(e core.Event) core.OutcomeKind {
			if e.Type == "invoice.sent" {
				return core.DeadLettered
			}
			return core.Published
		}, "boom")
	}
	for _, f := range []core.ReplayFilter{
		{All: true},
		{IDs: []core.ID{events[0].ID, events[2].ID, core.NewID()}},
		{Types: []string{"order.placed", "invoice.sent"}},
		{AggregateType: "order"},
		{AggregateID: "2"},
		{AggregateType: "order", AggregateID: "1"},
		{Since: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Since: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{DeadOnly: true},
		{DeadOnly: true, Types: []string{"order.paid"}},
	} {
		settleAll()
		got, err := a.recentlyPublished(ctxT(t), o.pool, f, time.Hour)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		n, err := o.store.Replay(ctxT(t), f)
		if err != nil {
			t.Fatal(err)
		}
		if got.matched != n {
			t.Errorf("filter %+v: counted %d, Replay replayed %d", f, got.matched, n)
		}
	}
	if _, err := a.recentlyPublished(ctxT(t), o.pool, core.ReplayFilter{}, time.Hour); !errors.Is(err, postgres.ErrEmptyFilter) {
		t.Errorf("an empty filter: %v, want ErrEmptyFilter", err)
	}
}
