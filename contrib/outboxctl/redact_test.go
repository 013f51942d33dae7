package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// hostileSecrets are passwords and tokens that break URL parsing or a
// pattern that stops at the first "@", "/" or space.
var hostileSecrets = []string{"p@ss/w rd", "p@ss@x", "pa ss", "a/b:c", `it's a\ secret`}

// TestRedactHostileURLs: a password with an unescaped "@", "/" or space,
// the NATS token form and keyword/value passwords are redacted from every
// message, whatever the driver made of them.
func TestRedactHostileURLs(t *testing.T) {
	t.Parallel()
	for _, pw := range hostileSecrets {
		kv := "host=db user=app password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "' dbname=x"
		for _, conn := range []string{"postgres://app:" + pw + "@db:5432/x", "nats://" + pw + "@nats:4222", kv} {
			a := &app{}
			a.addURLSecrets(conn)
			for _, msg := range []string{
				"cannot reach PostgreSQL at " + conn + ": connection refused",
				"--database-url " + displayURL(conn) + " is not a URL",
				"login for " + pw + " refused",
			} {
				if got := a.redact(msg); strings.Contains(got, pw) {
					t.Errorf("redact(%q) = %q: %q is left", msg, got, pw)
				}
			}
			if got := displayURL(conn); strings.Contains(got, pw) {
				t.Errorf("displayURL(%q) = %q", conn, got)
			}
		}
	}
}

// TestHostileCredentialsAreNotPrinted runs the commands that print a
// database or broker URL with credentials that do not parse as a URL.
func TestHostileCredentialsAreNotPrinted(t *testing.T) {
	t.Parallel()
	// The relays get as far as connecting to their broker.
	o := newOutbox(t)
	for _, tc := range []struct {
		args   []string
		secret []string
	}{
		{[]string{"status", "--database-url", "postgres://app:p@ss/w rd@127.0.0.1:1/test"}, []string{"p@ss", "ss/w", "w rd"}},
		{[]string{"status", "--database-url", "postgres://app:p@ss@127.0.0.1:1/test?sslmode=disable"}, []string{"p@ss", "ss@"}},
		{[]string{"status", "--database-url", "postgres://app:pa ss@127.0.0.1:1/test"}, []string{"pa ss"}},
		{[]string{"status", "--database-url", "postgres://app:a/b:c@127.0.0.1:1/test"}, []string{"a/b:c", "b:c"}},
		{[]string{"status", "--database-url", `host=127.0.0.1 port=1 user=app password='it\'s a secret' dbname=test`}, []string{`it\'s`, "s a secret", "secret"}},
		{o.args("relay", "--transport", "nats", "--nats-url", "nats://s3cr3tT0ken@127.0.0.1:1", "--drain"), []string{"s3cr3tT0ken"}},
		{o.args("relay", "--transport", "amqp", "--amqp-url", "amqp://guest:gu@st/x@127.0.0.1:1/", "--drain"), []string{"gu@st", "st/x"}},
		{[]string{"relay", "--help"}, []string{"natst0ken", "amqpp@ss"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := cli(t, env("NATS_URL=nats://natst0ken@nats:4222", "AMQP_URL=amqp://u:amqpp@ss@mq/"), tc.args...)
			for _, s := range tc.secret {
				if strings.Contains(r.stderr, s) || strings.Contains(r.stdout, s) {
					t.Errorf("output holds %q:\nstdout: %s\nstderr: %s", s, r.stdout, r.stderr)
				}
			}
			if tc.args[1] != "--help" {
				wantOneLineError(t, r, exitError)
			}
		})
	}
}

// TestLogsAreRedacted: libraries log errors that quote broker URLs and
// connection strings; the relay's logger removes their credentials in
// both formats, and JSON stays JSON.
func TestLogsAreRedacted(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		var out bytes.Buffer
		a := &app{}
		a.addSecret("tok_s3cret")
		lf := logFlags{format: format, level: "info", redact: a.redact}
		logger, err := lf.logger(&out)
		if err != nil {
			t.Fatal(err)
		}
		logger.Error("dial amqp://guest:gu@st/x@mq:5672/ failed",
			"err", errors.New("cannot connect to nats://natst0ken@nats:4222"),
			"dsn", "host=db password='p w' dbname=x",
			"auth", "Bearer tok_s3cret")
		got := out.String()
		for _, secret := range []string{"gu@st", "st/x", "natst0ken", "p w", "tok_s3cret"} {
			if strings.Contains(got, secret) {
				t.Errorf("%s log holds %q: %s", format, secret, got)
			}
		}
		if format == "json" && !json.Valid(out.Bytes()) {
			t.Errorf("json log is not JSON: %s", got)
		}
	}
}
