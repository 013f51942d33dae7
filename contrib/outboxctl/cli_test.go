package main

import (
	"strings"
	"testing"
)

func TestHelpListsEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	r := cli(t, env(), "--help")
	wantOK(t, r)
	for _, c := range commands {
		if !strings.Contains(r.stdout, "  "+c.name+" ") {
			t.Errorf("--help does not list %s:\n%s", c.name, r.stdout)
		}
	}
	for cmd, flags := range map[string][]string{
		"migrate":         {"--print", "--down", "--partitions", "--database-url", "--schema", "--table"},
		"migrate status":  {"--json"},
		"migrate down":    {"--to", "--yes"},
		"relay":           {"--transport", "--qstash-url", "--qstash-token", "--destination", "--routes", "--nats-url", "--amqp-url", "--batch-size", "--concurrency", "--lease", "--publish-timeout", "--max-attempts", "--poll-interval", "--no-notify", "--log-format", "--drain"},
		"status":          {"--json", "--max-age"},
		"dlq list":        {"--limit", "--after", "--json"},
		"dlq show":        {"--id", "--json"},
		"dlq replay":      {"--id", "--all"},
		"dlq purge":       {"--id", "--all", "--yes"},
		"replay":          {"--id", "--type", "--aggregate", "--since", "--until", "--dead-only", "--all", "--transport"},
		"prune":           {"--older-than", "--processed", "--processed-older-than", "--batch-size", "--dry-run", "--yes"},
		"qstash-dev":      {"--addr"},
		"help relay":      {"--transport"},
		"dlq --help list": nil,
	} {
		args := append(strings.Fields(cmd), "--help")
		r := cli(t, env(), args...)
		wantOK(t, r)
		if !strings.HasPrefix(r.stdout, "Usage: outboxctl ") {
			t.Errorf("%s --help: no usage line:\n%s", cmd, r.stdout)
		}
		for _, f := range flags {
			if !strings.Contains(r.stdout, "\n  "+f+" ") && !strings.Contains(r.stdout, "\n  "+f+"\n") {
				t.Errorf("%s --help does not document %s:\n%s", cmd, f, r.stdout)
			}
		}
	}
}

// TestHelpRedactsSecrets: --help shows defaults from the environment, which
// must not print a password or a token.
func TestHelpRedactsSecrets(t *testing.T) {
	t.Parallel()
	r := cli(t, append(env(), "DATABASE_URL=postgres://app:hunter2@db.internal:5432/prod", "QSTASH_TOKEN=tok_s3cret",
		"AMQP_URL=amqp://user:amqpsecret@mq:5672/"), "relay", "--help")
	wantOK(t, r)
	for _, secret := range []string{"hunter2", "tok_s3cret", "amqpsecret"} {
		if strings.Contains(r.stdout, secret) {
			t.Errorf("relay --help prints the secret %q:\n%s", secret, r.stdout)
		}
	}
}

func TestBadFlagsGiveOneLineErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		contains []string
	}{
		{"no command", nil, []string{"no command given"}},
		{"unknown command", []string{"frobnicate"}, []string{`unknown command "frobnicate"`, "outboxctl --help"}},
		{"unknown flag", []string{"status", "--frobnicate"}, []string{"--frobnicate", "outboxctl status --help"}},
		{"bad int", []string{"relay", "--batch-size", "lots"}, []string{"--batch-size", "outboxctl relay --help"}},
		{"bad duration", []string{"relay", "--lease", "forever"}, []string{"--lease", "forever"}},
		{"zero batch", []string{"relay", "--batch-size", "0"}, []string{"--batch-size", "at least 1"}},
		{"publish timeout over lease", []string{"relay", "--lease", "5s", "--publish-timeout", "10s"}, []string{"--publish-timeout", "--lease"}},
		{"bad log format", []string{"relay", "--log-format", "xml"}, []string{"--log-format", "text or json"}},
		{"bad transport", []string{"relay", "--transport", "carrier-pigeon", "--database-url", "postgres://127.0.0.1:1/x"}, nil},
		{"stray argument", []string{"status", "now"}, []string{`unexpected argument "now"`}},
		{"replay without criterion", []string{"replay"}, []string{"replay needs a criterion", "--all"}},
		{"replay bad id", []string{"replay", "--id", "42"}, []string{`--id "42" is not an event ID`}},
		{"replay bad time", []string{"replay", "--since", "yesterday"}, []string{"--since", "RFC 3339"}},
		{"replay bad aggregate", []string{"replay", "--aggregate", "order42"}, []string{"--aggregate", "TYPE/ID"}},
		{"dlq without subcommand", []string{"dlq"}, []string{"list, show, replay or purge"}},
		{"dlq purge without target", []string{"dlq", "purge", "--yes"}, []string{"--id", "--all"}},
		{"dlq show without id", []string{"dlq", "show"}, []string{"--id"}},
		{"prune without age", []string{"prune"}, []string{"--older-than"}},
		{"prune bad age", []string{"prune", "--older-than", "7 days"}, []string{"--older-than", "7d"}},
		{"migrate down without target", []string{"migrate", "down", "--yes"}, []string{"--to"}},
		{"migrate down without yes", []string{"migrate", "down", "--to", "0"}, []string{"--yes"}},
		{"bad schema", []string{"migrate", "--print", "--schema", "Robert'); DROP TABLE students;--"}, []string{"schema"}},
		{"unescaped password", []string{"status", "--database-url", "postgres://app:p@ss@127.0.0.1:1/test"}, []string{"postgres://***@127.0.0.1:1/test", "percent-encode"}},
		{"routes file missing", []string{"relay", "--routes", "/nonexistent/routes.txt", "--qstash-token", "x"}, []string{"--routes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, env(), tc.args...)
			wantOneLineError(t, r, exitError, tc.contains...)
		})
	}
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	const url = "postgres://postgres:s3cret-pw@127.0.0.1:1/test?sslmode=disable"
	for _, args := range [][]string{
		{"status"},
		{"status", "--max-age", "1m"}, // an unreachable database is an error (2), not "stale" (1)
		{"migrate"},
		{"migrate", "status"},
		{"relay", "--qstash-token", "x", "--destination", "https://example.com/hook"},
		{"dlq", "list"},
		{"replay", "--all"},
		{"prune", "--older-than", "7d"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := cli(t, env(), append(args, "--database-url", url)...)
			wantOneLineError(t, r, exitError, "cannot reach PostgreSQL", "127.0.0.1:1", "connection refused", "DATABASE_URL")
			if strings.Contains(r.stderr, "s3cret-pw") {
				t.Errorf("the password leaked: %s", r.stderr)
			}
		})
	}
	t.Run("from the environment", func(t *testing.T) {
		t.Parallel()
		r := cli(t, append(env(), "DATABASE_URL="+url), "status")
		wantOneLineError(t, r, exitError, "cannot reach PostgreSQL", "postgres://postgres:***@127.0.0.1:1/test")
	})
}

func TestUnmigratedSchemaSaysToMigrate(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"status"},
		{"relay", "--qstash-token", "x", "--destination", "https://example.com/hook"},
		{"dlq", "list"},
		{"prune", "--older-than", "1d"},
	} {
		r := cli(t, env(), append(args, "--schema", "outboxctl_never_migrated")...)
		wantOneLineError(t, r, exitError, "outboxctl migrate", "outboxctl_never_migrated")
	}
}

func TestRelayRefusesUnreachableOrWrongQStash(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)

	r := cli(t, qstashEnv(), o.args("relay", "--qstash-url", "http://127.0.0.1:1", "--destination", q.consumer)...)
	wantOneLineError(t, r, exitError, "cannot reach QStash at http://127.0.0.1:1", "connection refused", "QSTASH_URL")

	r = cli(t, env("QSTASH_TOKEN=wrong-token"), o.args("relay", "--qstash-url", q.url, "--destination", q.consumer)...)
	wantOneLineError(t, r, exitError, "refused the token", "QSTASH_TOKEN")
	if strings.Contains(r.stderr, "wrong-token") {
		t.Errorf("the token leaked: %s", r.stderr)
	}

	r = cli(t, env(), o.args("relay", "--qstash-url", q.url, "--destination", q.consumer)...)
	wantOneLineError(t, r, exitError, "QSTASH_TOKEN")

	r = cli(t, qstashEnv(), o.args("relay", "--qstash-url", q.url)...)
	wantOneLineError(t, r, exitError, "--destination", "--routes")

	r = cli(t, qstashEnv(), o.args("relay", "--qstash-url", q.url, "--destination", "not a url")...)
	wantOneLineError(t, r, exitError, "--destination")
}
