package main

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// oldRows writes the retention scenario into o: published events 8 days
// old (due for deletion at 7 days) and 1 hour old (kept), pending and
// dead-lettered events 40 days old (never deleted), and processed records
// 31 days old (due at 30 days) and 1 day old (kept).
func oldRows(t *testing.T, o outbox) (duePublished, dueProcessed int) {
	t.Helper()
	ins := func(n int, cols, vals string) {
		for i := 0; i < n; i++ {
			o.exec(t, "INSERT INTO "+o.table()+" (id, event_type, payload, "+cols+") VALUES ($1, 'x', '{}', "+vals+")", core.NewID().String())
		}
	}
	ins(6, "created_at, published_at", "now() - interval '9 days', now() - interval '8 days'")
	ins(3, "created_at, published_at", "now() - interval '2 hours', now() - interval '1 hour'")
	ins(2, "created_at, available_at", "now() - interval '40 days', now() + interval '1 day'")
	ins(2, "created_at, dead_at, last_error", "now() - interval '40 days', now() - interval '39 days', 'poison'")
	for i := 0; i < 5; i++ {
		age := "31 days"
		if i >= 4 {
			age = "1 day"
		}
		o.exec(t, `INSERT INTO "`+o.schema+`".outbox_events_processed (consumer, event_id, processed_at) VALUES ('billing', $1, now() - $2::interval)`,
			core.NewID().String(), age)
	}
	return 6, 4
}

func (o outbox) countProcessed(t *testing.T) int {
	t.Helper()
	var n int
	if err := o.pool.QueryRow(ctxT(t), `SELECT count(*) FROM "`+o.schema+`".outbox_events_processed`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRelayServiceRetention: with the defaults (7 days, 30 days) the
// relay's retention deletes old published events and processed records,
// never pending or dead-lettered ones, and reports it in /metrics;
// --retain-published 0 --retain-processed 0 runs no retention.
func TestRelayServiceRetention(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	duePub, dueProc := oldRows(t, o)

	keep := start(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll", "--retain-published", "0", "--retain-processed", "0")...)
	base := httpAddr(t, keep)
	waitFor(t, 30*time.Second, "the keeping relay ready", func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	if _, ok := metricSum(scrape(t, base), "outboxctl_retention_leader", nil); ok {
		t.Error("a relay told to keep everything runs retention")
	}
	keep.signal(t, syscall.SIGTERM)
	if code := keep.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d:\n%s", code, keep.stderr)
	}
	if n := o.count(t, "true"); n != 13 {
		t.Fatalf("%d rows after the keeping relay, want all 13", n)
	}

	p := start(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll", "--retention-interval", "200ms")...)
	base = httpAddr(t, p)
	waitFor(t, 30*time.Second, "old rows deleted", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return o.count(t, "true") == 13-duePub && o.countProcessed(t) == 5-dueProc
	})
	for what, where := range map[string]string{
		"recent published": "published_at IS NOT NULL", "pending": "published_at IS NULL AND dead_at IS NULL", "dead-lettered": "dead_at IS NOT NULL",
	} {
		if n := o.count(t, where); n == 0 {
			t.Errorf("retention deleted the %s events", what)
		}
	}
	waitFor(t, 10*time.Second, "retention metrics", func() bool {
		m := scrape(t, base)
		l, _ := metricSum(m, "outboxctl_retention_leader", tenantLabels(o.schema))
		pub, _ := metricSum(m, "outboxctl_retention_deleted_total", tenantLabels(o.schema, "kind", "published"))
		proc, _ := metricSum(m, "outboxctl_retention_deleted_total", tenantLabels(o.schema, "kind", "processed"))
		_, last := metricSum(m, "outboxctl_retention_last_pass_timestamp_seconds", tenantLabels(o.schema))
		return l == 1 && pub == float64(duePub) && proc == float64(dueProc) && last
	})
}

// TestRelayServiceRetentionLeader runs three relay processes on one table:
// retention leads on exactly one of them at a time, and moves to another
// within about a lease when the leader is SIGKILLed.
func TestRelayServiceRetentionLeader(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	oldRows(t, o)
	const lease = 2 * time.Second
	relays := make([]*proc, 3)
	bases := make([]string, 3)
	for i := range relays {
		relays[i] = start(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll", "--retention-interval", "200ms", "--retention-lease", lease.String())...)
		bases[i] = httpAddr(t, relays[i])
	}
	// leaders reads outboxctl_retention_leader from every live relay.
	leaders := func(dead int) []int {
		var out []int
		for i, b := range bases {
			if i == dead {
				continue
			}
			code, body := get(t, b+"/metrics")
			if code != http.StatusOK {
				t.Fatalf("relay %d /metrics: %d %s", i, code, body)
			}
			if v, _ := metricSum(parseMetrics(t, body), "outboxctl_retention_leader", tenantLabels(o.schema)); v == 1 {
				out = append(out, i)
			}
		}
		return out
	}
	var leader int
	waitFor(t, 30*time.Second, "one retention leader", func() bool {
		l := leaders(-1)
		if len(l) > 1 {
			t.Fatalf("relays %v lead retention at once", l)
		}
		if len(l) == 1 {
			leader = l[0]
		}
		return len(l) == 1
	})
	// Steady: still one, and the same.
	for i := 0; i < 10; i++ {
		if l := leaders(-1); len(l) != 1 || l[0] != leader {
			t.Fatalf("leaders %v, want only relay %d", l, leader)
		}
	}
	relays[leader].signal(t, syscall.SIGKILL)
	relays[leader].wait(t, 10*time.Second)
	killed := time.Now()
	waitFor(t, 3*lease+5*time.Second, "another retention leader", func() bool {
		l := leaders(leader)
		if len(l) > 1 {
			t.Fatalf("relays %v lead retention at once", l)
		}
		return len(l) == 1
	})
	t.Logf("retention moved %s after the leader was killed (lease %s)", time.Since(killed).Round(time.Millisecond), lease)
	if n := o.count(t, "published_at IS NULL"); n != 4 {
		t.Errorf("%d pending and dead-lettered rows, want the 4 written", n)
	}
}
