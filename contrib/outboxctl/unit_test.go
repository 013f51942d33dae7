package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outboxkit/postgres"
)

// In-process tests of the pieces the process tests cannot reach cheaply.

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	lines := "# comment\n\norder.placed = https://a.example/hook\n  order.shipped=shipping  \n"
	got, err := parseRoutes([]byte(lines))
	want := map[string]route{"order.placed": {Destination: "https://a.example/hook"}, "order.shipped": {Destination: "shipping"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("lines: %v, %v", got, err)
	}
	js := `{"a": "https://a.example/hook", "b": {"urlGroup": "g", "queue": "q"}, "c": {"topic": "t"}}`
	got, err = parseRoutes([]byte(js))
	want = map[string]route{"a": {Destination: "https://a.example/hook"}, "b": {Destination: "g", Kind: "urlGroup", Queue: "q"}, "c": {Destination: "t", Kind: "topic"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("json: %v, %v", got, err)
	}
	for _, bad := range []string{"order.placed", "=x", "a=x\na=y", `{"a": 1}`, `{"a": {"url": "u", "topic": "t"}}`, `{"a": {"uri": "u"}}`, `{"a": ""}`, `{`} {
		if _, err := parseRoutes([]byte(bad)); err == nil {
			t.Errorf("parseRoutes(%q) accepted a bad file", bad)
		}
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "15m": 15 * time.Minute, "36h": 36 * time.Hour,
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "0": 0,
	} {
		var got time.Duration
		if err := (durationFlag{&got}).Set(in); err != nil || got != want {
			t.Errorf("duration flag %q = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "7 days", "d", "-1h", "1.5d", "xd", "213504d1h", "106752d"} {
		got := time.Duration(42)
		if err := (durationFlag{&got}).Set(bad); err == nil || got != 42 {
			t.Errorf("duration flag %q accepted (%v)", bad, got)
		}
	}
	for d, want := range map[time.Duration]string{2 * time.Hour: "2h", 90 * time.Minute: "1h30m", 7 * 24 * time.Hour: "7d", 1500 * time.Millisecond: "1.5s"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	a := &app{}
	a.addURLSecrets("postgres://app:p%40ss@db:5432/x")
	a.addSecret("tok_123456")
	for in, want := range map[string]string{
		"postgres://app:hunter2@db:5432/x":           "postgres://app:***@db:5432/x",
		"amqp://guest:guest@mq:5672/":                "amqp://guest:***@mq:5672/",
		"host=db user=app password=hunter2 dbname=x": "host=db user=app password=*** dbname=x",
		"failed: password=p@ss":                      "failed: password=***",
		"Bearer tok_123456 refused":                  "Bearer *** refused",
		"https://q.example/v2?qstash_token=abc&x=1":  "https://q.example/v2?qstash_token=***&x=1",
		"postgres://app@db:5432/x":                   "postgres://app@db:5432/x",
	} {
		if got := a.redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDBErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	a := &app{g: globals{databaseURL: "postgres://app:pw@db:5432/x", schema: "tenant_a", table: "outbox_events"}}
	for err, want := range map[error]string{
		fmt.Errorf("stats: %w", postgres.ErrNotMigrated):                          "outboxctl migrate --schema tenant_a",
		&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}: "check the user and password",
		&pgconn.PgError{Code: "3D000", Message: `database "x" does not exist`}:    "create it or fix the database name",
		&pgconn.PgError{Code: "42501", Message: "permission denied for schema"}:   "grant the role rights",
		fmt.Errorf("query: %w", context.Canceled):                                 "interrupted",
	} {
		got := a.dbError(err).Error()
		if !strings.Contains(got, want) {
			t.Errorf("dbError(%v) = %q, want it to contain %q", err, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	if got := oneLine("a\nb\r\n  c  \n"); got != "a; b; c" {
		t.Errorf("oneLine = %q", got)
	}
}

// TestProgress checks both displays: a bar redrawn in place on a terminal,
// plain lines elsewhere.
func TestProgress(t *testing.T) {
	t.Parallel()
	var term bytes.Buffer
	p := (&app{stdout: &term, terminal: true}).startProgress("pruning", "events", 1000)
	p.set(500)
	p.done()
	if out := term.String(); !strings.Contains(out, "\r") || !strings.Contains(out, "[===============>") || !strings.Contains(out, " 50%  500/1000 events") {
		t.Errorf("terminal progress = %q", out)
	}

	var plain bytes.Buffer
	p = (&app{stdout: &plain}).startProgress("pruning", "events", 0)
	p.set(1000)
	p.set(2000) // within a second of the previous line: not printed
	p.done()
	if out := plain.String(); strings.Contains(out, "\r") || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "pruning: 1000 events so far") {
		t.Errorf("plain progress = %q", out)
	}
}

// TestRunInProcess runs the CLI through run, as main does, to check that a
// panic or an error still ends in one line and the right exit code.
func TestRunInProcess(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--id", "nope"}, &stdout, &stderr); code != exitError {
		t.Errorf("exit code %d", code)
	}
	if strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("stderr = %q", stderr.String())
	}
	if !errors.Is(checkFailed("x"), errCheckFailed) {
		t.Error("checkFailed does not match errCheckFailed")
	}
}

// --vacuum-interval 0s turns the leader's VACUUM off: the library reads a
// zero VacuumInterval as its default (10s), so the flag's 0 must become a
// negative one; a positive value passes through.
func TestRetentionConfigVacuumInterval(t *testing.T) {
	for _, c := range []struct {
		flag   time.Duration
		wantOn bool
		want   time.Duration
	}{
		{flag: 0, wantOn: false},
		{flag: 250 * time.Millisecond, wantOn: true, want: 250 * time.Millisecond},
	} {
		s := relaySettings{retainPublished: time.Hour, vacuumInterval: c.flag}
		got := s.retentionConfig(databaseSpec{Table: "outbox_events"}, "public", nil).WithDefaults().VacuumInterval
		if on := got >= 0; on != c.wantOn || (c.wantOn && got != c.want) {
			t.Errorf("--vacuum-interval %v: RetentionConfig.VacuumInterval %v after defaults; want on=%v (%v)", c.flag, got, c.wantOn, c.want)
		}
	}
}
