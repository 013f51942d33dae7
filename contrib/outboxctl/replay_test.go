package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// state reads an event's row: whether it is pending and its attempts.
func (o outbox) state(t *testing.T, id core.ID) (pending bool, attempts int) {
	t.Helper()
	err := o.pool.QueryRow(ctxT(t), "SELECT published_at IS NULL AND dead_at IS NULL, attempts FROM "+o.table()+" WHERE id = $1", id.String()).
		Scan(&pending, &attempts)
	if err != nil {
		t.Fatalf("read event %s: %v", id, err)
	}
	return pending, attempts
}

func TestReplayKeepsIDs(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	var (
		a1 = event(t, "order.placed", "order", "1")
		a2 = event(t, "order.placed", "order", "2")
		b1 = event(t, "invoice.sent", "invoice", "1")
		b2 = event(t, "invoice.sent", "invoice", "2")
		d1 = event(t, "invoice.sent", "invoice", "3") // dead-lettered
		c1 = event(t, "order.paid", "order", "1")
	)
	all := []core.Event{a1, a2, b1, b2, d1, c1}
	o.add(t, all...)
	o.settle(t, func(e core.Event) core.OutcomeKind {
		if e.ID == d1.ID {
			return core.DeadLettered
		}
		return core.Published
	}, "consumer said 400")
	p1 := event(t, "order.placed", "order", "9") // added after the settle: stays pending
	o.add(t, p1)

	replay := func(want int, args ...string) {
		t.Helper()
		r := cli(t, env(), o.args(append([]string{"replay"}, args...)...)...)
		wantOK(t, r)
		if !strings.Contains(r.stdout, "replayed "+strconv.Itoa(want)+" ") {
			t.Fatalf("replay %v: stdout %q, want %d replayed", args, r.stdout, want)
		}
	}
	wantPending := func(events ...core.Event) {
		t.Helper()
		for _, e := range events {
			if ok, attempts := o.state(t, e.ID); !ok || attempts != 0 {
				t.Errorf("event %s (%s %s) pending=%v attempts=%d, want pending with 0 attempts", e.ID, e.Type, e.AggregateKey(), ok, attempts)
			}
		}
	}

	// By ID, repeatable and comma-separated. The pending p1 is not touched.
	replay(2, "--id", a1.ID.String()+","+p1.ID.String(), "--id", b1.ID.String())
	wantPending(a1, b1)
	// By type: b2 and the dead d1 (b1 is pending already).
	replay(2, "--type", "invoice.sent")
	wantPending(b2, d1)
	// By aggregate: only published or dead events of order/2 (a2).
	replay(1, "--aggregate", "order/2")
	wantPending(a2)
	// By aggregate type alone: c1 is the last published order.
	replay(1, "--aggregate", "order/")
	wantPending(c1)

	// The replay rewrote no ID and added no row.
	if n := o.count(t, "true"); n != len(all)+1 {
		t.Fatalf("%d rows after replays, want %d", n, len(all)+1)
	}
	for _, e := range append(all, p1) {
		if o.count(t, "id = $1", e.ID.String()) != 1 {
			t.Errorf("event %s is gone: replay must keep IDs", e.ID)
		}
	}
}

func TestReplayFilters(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	old, recent, dead := event(t, "x", "", ""), event(t, "x", "", ""), event(t, "x", "", "")
	o.add(t, old, recent, dead)
	o.exec(t, "UPDATE "+o.table()+" SET created_at = '2024-01-01T00:00:00Z' WHERE id = $1", old.ID.String())
	o.settle(t, func(e core.Event) core.OutcomeKind {
		if e.ID == dead.ID {
			return core.DeadLettered
		}
		return core.Published
	}, "boom")

	// --dead-only leaves published events alone.
	r := cli(t, env(), o.args("replay", "--dead-only")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "replayed 1 dead-lettered event(s)") {
		t.Errorf("replay --dead-only: %q", r.stdout)
	}
	if p, _ := o.state(t, dead.ID); !p {
		t.Error("the dead letter was not replayed")
	}
	if p, _ := o.state(t, recent.ID); p {
		t.Error("--dead-only replayed a published event")
	}

	// --since/--until bound created_at: only the 2024 event.
	r = cli(t, env(), o.args("replay", "--since", "2023-12-31T00:00:00Z", "--until", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339))...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "replayed 1 ") {
		t.Errorf("replay --since --until: %q", r.stdout)
	}
	if p, _ := o.state(t, old.ID); !p {
		t.Error("the event inside the time range was not replayed")
	}
	if p, _ := o.state(t, recent.ID); p {
		t.Error("an event outside the time range was replayed")
	}

	// --all takes the rest.
	wantOK(t, cli(t, env(), o.args("replay", "--all")...))
	if n := o.count(t, "published_at IS NOT NULL OR dead_at IS NOT NULL"); n != 0 {
		t.Errorf("%d events still published or dead after replay --all", n)
	}
}
