package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// TestRelayThroughPgBouncer: with --database-url through PgBouncer in
// transaction mode (CI runs it on 127.0.0.1:6432) the relay's statements
// survive it (postgres.NewPoolWithConfig), and with --wakeup-url past it
// nothing warns. status works there too.
func TestRelayThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pgtest.RequireBouncer(t)
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	r := cli(t, env(), o.args("status", "--database-url", pgtest.BouncerURL())...)
	wantOK(t, r)
	args := q.relayArgs(o, "--database-url", pgtest.BouncerURL(), "--wakeup-url", pgtest.URL())
	p := start(t, qstashEnv(), args...)
	ids := o.insertSQL(t, 50, "order.placed")
	waitFor(t, 30*time.Second, "the events relayed through PgBouncer", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		got := q.got()
		for _, id := range ids {
			if got[id] == 0 {
				return false
			}
		}
		return true
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM, want 0:\n%s", code, p.stderr)
	}
	if n := o.count(t, "published_at IS NULL"); n != 0 {
		t.Fatalf("%d event(s) not settled through PgBouncer:\n%s", n, p.stderr)
	}
	for _, bad := range []string{"SQLSTATE 26000", "SQLSTATE 42P05", "does not keep LISTEN"} {
		if strings.Contains(p.stderr.String(), bad) {
			t.Fatalf("the relay's log mentions %q:\n%s", bad, p.stderr)
		}
	}
}
