package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/redact"
	"github.com/outboxkit/outboxkit/postgres"
)

var (
	// errHelpShown ends a command after --help printed its usage: exit 0.
	errHelpShown = errors.New("help shown")
	// errCheckFailed is matched by a failed check (status --max-age): exit
	// 1, distinct from an error.
	errCheckFailed = errors.New("check failed")
)

// usageError is a mistake in the command line; its text says what to do.
type usageError string

func (e usageError) Error() string { return string(e) }

// checkFailed reports a failed check with its explanation.
func checkFailed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errCheckFailed}, args...)...)
}

// printErr writes err to stderr as one line, "outboxctl: ...", with
// passwords and tokens redacted. Operators read these in logs and CI
// output, where a multi-line message is split up and a leaked password
// stays forever.
func (a *app) printErr(err error) {
	msg := err.Error()
	if errors.Is(err, errCheckFailed) {
		msg = strings.TrimPrefix(msg, errCheckFailed.Error()+": ")
	}
	fmt.Fprintln(a.stderr, "outboxctl: "+a.redact(oneLine(msg)))
}

// warn writes a one-line warning to stderr.
func (a *app) warn(format string, args ...any) {
	fmt.Fprintln(a.stderr, "outboxctl: warning: "+a.redact(oneLine(fmt.Sprintf(format, args...))))
}

// oneLine folds a multi-line message (some drivers produce them) into one.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return strings.Join(parts, "; ")
}

// redact removes every known secret, then anything that looks like a
// credential (a URL's userinfo, a connection string's password), from s.
func (a *app) redact(s string) string { return redact.String(s, a.secrets...) }

// addSecret records a value to redact from every message.
func (a *app) addSecret(s string) {
	if s != "" {
		a.secrets = append(a.secrets, s)
	}
}

// addURLSecrets records the credentials of a URL or connection string in
// every form a message may quote them, so they are redacted even from a
// driver's half-redacted echo of a string it could not parse.
func (a *app) addURLSecrets(raw string) { a.secrets = append(a.secrets, redact.Secrets(raw)...) }

// displayURL is a URL as messages show it: credentials redacted, the whole
// userinfo when it does not parse.
func displayURL(raw string) string { return redact.String(raw) }

// dbError turns an error from PostgreSQL (or the pgx driver) into one
// message that says what to do. It is the one place database errors are
// interpreted.
func (a *app) dbError(err error) error {
	return a.dbErrorAt(err, a.g.databaseURL, a.g.schema, a.g.table)
}

// dbErrorAt is dbError for a database and outbox of the relay's tenants.
func (a *app) dbErrorAt(err error, url, schema, table string) error {
	if err == nil {
		return nil
	}
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	where := displayURL(url)
	hint := "set --database-url or DATABASE_URL"
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, postgres.ErrNotMigrated),
		errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000" || pgErr.Code == "42703"):
		return fmt.Errorf("the outbox tables are missing or out of date in schema %q (table %q) at %s: run `outboxctl migrate --schema %s --table %s` first, or check --schema/--table",
			schema, table, where, schema, table)
	case errors.Is(err, core.ErrInvalidConfig):
		return errors.New(trimLibPrefix(err.Error()))
	case errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000"):
		return fmt.Errorf("PostgreSQL at %s refused the login: %s: check the user and password in --database-url or DATABASE_URL", where, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return fmt.Errorf("PostgreSQL at %s: %s: create it or fix the database name in --database-url or DATABASE_URL", where, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return fmt.Errorf("PostgreSQL at %s: %s: grant the role rights on schema %q, or connect as its owner", where, pgErr.Message, schema)
	case errors.As(err, &pgErr):
		return fmt.Errorf("PostgreSQL at %s: %s (SQLSTATE %s)", where, pgErr.Message, pgErr.Code)
	case errors.Is(err, context.Canceled):
		return errors.New("interrupted")
	case isConnectError(err):
		return fmt.Errorf("cannot reach PostgreSQL at %s: %s — is it running? %s", where, netCause(err), hint)
	}
	return errors.New(trimLibPrefix(err.Error()))
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// netCause is the innermost meaningful reason a connection failed:
// "connection refused", "no such host", "timed out".
func netCause(err error) string {
	var errno syscall.Errno
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return "no such host " + dnsErr.Name
	case errors.As(err, &errno):
		return errno.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	}
	msg := err.Error()
	// pgx and others nest "a: b: c"; the last part is the cause.
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

// trimLibPrefix drops the package prefixes of library errors
// ("outboxkit/postgres: ", "outboxkit: invalid configuration: "): the
// message follows "outboxctl: ", and the prefix tells an operator nothing.
func trimLibPrefix(s string) string {
	for _, p := range []string{"outboxkit/postgres: ", "outboxkit: invalid configuration: ", "outboxkit: "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}
