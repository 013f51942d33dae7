package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/core"
)

// deadLetters writes n events and dead-letters them with lastError, plus
// one published event that dlq commands must never touch.
func deadLetters(t *testing.T, o outbox, n int, lastError string) (dead []core.Event, published core.Event) {
	t.Helper()
	published = event(t, "ok", "", "")
	for i := 0; i < n; i++ {
		e := event(t, "invoice.sent", "invoice", strconv.Itoa(i))
		e.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		dead = append(dead, e)
	}
	o.add(t, append(dead, published)...)
	o.settle(t, func(e core.Event) core.OutcomeKind {
		if e.ID == published.ID {
			return core.Published
		}
		return core.DeadLettered
	}, lastError)
	return dead, published
}

func TestDLQListAndShow(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)

	r := cli(t, env(), o.args("dlq", "list")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "no dead-lettered events") {
		t.Errorf("dlq list on an empty queue: %q", r.stdout)
	}

	dead, published := deadLetters(t, o, 5, "qstash: 400 Bad Request: destination refused\nsecond line")
	r = cli(t, env(), o.args("dlq", "list")...)
	wantOK(t, r)
	for _, e := range dead {
		if !strings.Contains(r.stdout, e.ID.String()) {
			t.Errorf("dlq list lacks %s:\n%s", e.ID, r.stdout)
		}
	}
	if strings.Contains(r.stdout, published.ID.String()) {
		t.Errorf("dlq list shows a published event:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "invoice/0") || !strings.Contains(r.stdout, "destination refused; second line") {
		t.Errorf("dlq list lacks the aggregate or the one-line error:\n%s", r.stdout)
	}

	// Paging: --limit with a hint on stderr, --after for the next page.
	r = cli(t, env(), o.args("dlq", "list", "--limit", "2", "--json")...)
	wantOK(t, r)
	var page []recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
		t.Fatalf("dlq list --json: %v\n%s", err, r.stdout)
	}
	if len(page) != 2 || page[0].State != "dead-lettered" || page[0].LastError == "" || string(page[0].Payload) == "" || page[0].DeadAt == nil {
		t.Fatalf("dlq list --limit 2 --json = %+v", page)
	}
	if !strings.Contains(r.stderr, "--after "+page[1].ID) {
		t.Errorf("no paging hint on stderr: %q", r.stderr)
	}
	r = cli(t, env(), o.args("dlq", "list", "--after", page[1].ID, "--json")...)
	wantOK(t, r)
	var rest []recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &rest); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, rec := range append(page, rest...) {
		ids = append(ids, rec.ID)
	}
	var want []string
	for _, e := range dead {
		want = append(want, e.ID.String())
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("paged IDs %v, want %v", ids, want)
	}

	// show: everything about one event.
	r = cli(t, env(), o.args("dlq", "show", "--id", dead[0].ID.String())...)
	wantOK(t, r)
	for _, s := range []string{dead[0].ID.String(), "dead-lettered", "invoice.sent", "destination refused", "traceparent", `"type": "invoice.sent"`} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("dlq show lacks %q:\n%s", s, r.stdout)
		}
	}
	r = cli(t, env(), o.args("dlq", "show", "--id", dead[0].ID.String(), "--json")...)
	wantOK(t, r)
	var rec recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.ID != dead[0].ID.String() || rec.Headers["traceparent"] == "" {
		t.Errorf("dlq show --json = %+v (%v)", rec, err)
	}
	r = cli(t, env(), o.args("dlq", "show", "--id", core.NewID().String())...)
	wantOneLineError(t, r, exitError, "no event")
}

func TestDLQReplayAndPurge(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	dead, published := deadLetters(t, o, 6, "boom")

	// replay by ID: back to pending, same ID, attempts reset. Published
	// events named among the IDs are left alone, with a warning.
	r := cli(t, env(), o.args("dlq", "replay", "--id", dead[0].ID.String()+","+published.ID.String())...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "replayed 1 dead-lettered") || !strings.Contains(r.stderr, "1 of the 2 IDs were not dead-lettered") {
		t.Errorf("dlq replay: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if p, attempts := o.state(t, dead[0].ID); !p || attempts != 0 {
		t.Errorf("replayed dead letter: pending=%v attempts=%d", p, attempts)
	}
	if p, _ := o.state(t, published.ID); p {
		t.Error("dlq replay replayed a published event")
	}

	// purge needs --yes, and says how much it would delete.
	r = cli(t, env(), o.args("dlq", "purge", "--id", dead[1].ID.String())...)
	wantOneLineError(t, r, exitError, "would delete 1 dead-lettered event(s)", "--yes")
	if o.count(t, "id = $1", dead[1].ID.String()) != 1 {
		t.Fatal("purge without --yes deleted the event")
	}
	r = cli(t, env(), o.args("dlq", "purge", "--id", dead[1].ID.String(), "--yes")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "purged 1 ") || o.count(t, "id = $1", dead[1].ID.String()) != 0 {
		t.Fatalf("dlq purge --id --yes: %q, row still there: %d", r.stdout, o.count(t, "id = $1", dead[1].ID.String()))
	}

	// replay --all, then purge --all: what is pending or published stays.
	wantOK(t, cli(t, env(), o.args("dlq", "replay", "--id", dead[2].ID.String())...))
	r = cli(t, env(), o.args("dlq", "purge", "--all")...)
	wantOneLineError(t, r, exitError, "would delete 3 dead-lettered event(s)")
	r = cli(t, env(), o.args("dlq", "purge", "--all", "--yes")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "purged 3 ") {
		t.Errorf("dlq purge --all --yes: %q", r.stdout)
	}
	if n := o.count(t, "dead_at IS NOT NULL"); n != 0 {
		t.Errorf("%d dead letters left after purge --all", n)
	}
	for _, id := range []core.ID{dead[0].ID, dead[2].ID, published.ID} {
		if o.count(t, "id = $1", id.String()) != 1 {
			t.Errorf("purge --all deleted %s, which was not dead-lettered", id)
		}
	}
	r = cli(t, env(), o.args("dlq", "replay", "--all")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "replayed 0 ") {
		t.Errorf("dlq replay --all on an empty queue: %q", r.stdout)
	}
}

// TestDLQRedactsCredentials: a dead letter's last error is a transport's
// error text, which may quote a broker URL or a destination with
// credentials; dlq list and show print it redacted, in both formats.
func TestDLQRedactsCredentials(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	e := event(t, "invoice.sent", "invoice", "1")
	e.Destination = "https://hookuser:hooks3cret@hooks.example/in"
	o.add(t, e)
	o.settle(t, func(core.Event) core.OutcomeKind { return core.DeadLettered },
		"publish to amqp://guest:gu@st/x@mq:5672/ failed; nats://natst0ken@nats:4222 unreachable")
	for _, args := range [][]string{
		{"dlq", "list"}, {"dlq", "list", "--json"},
		{"dlq", "show", "--id", e.ID.String()}, {"dlq", "show", "--id", e.ID.String(), "--json"},
	} {
		r := cli(t, env(), o.args(args...)...)
		wantOK(t, r)
		if !strings.Contains(r.stdout, e.ID.String()) {
			t.Errorf("%s does not show the event:\n%s", strings.Join(args, " "), r.stdout)
		}
		for _, secret := range []string{"gu@st", "st/x", "natst0ken", "hooks3cret"} {
			if strings.Contains(r.stdout, secret) {
				t.Errorf("%s prints %q:\n%s", strings.Join(args, " "), secret, r.stdout)
			}
		}
	}
}
