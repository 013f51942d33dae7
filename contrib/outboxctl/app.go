package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes. 1 is reserved for "the check failed" (status --max-age) so a
// probe or an alert can tell an unhealthy outbox from a broken check (2).
const (
	exitOK          = 0
	exitCheckFailed = 1
	exitError       = 2
)

// localDatabaseURL is the development database outboxctl falls back to when
// neither --database-url nor DATABASE_URL is set: the server `make test` and
// the examples use. It is announced on stderr whenever it is used, so a
// production job that lost its DATABASE_URL says so instead of quietly
// talking to localhost.
// It is the same server internal/pgtest uses.
const localDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// app is one invocation of outboxctl: where output goes, where settings come
// from, and the global settings every database command shares.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// terminal says stdout is a terminal: long operations then draw a
	// progress bar instead of printing plain lines.
	terminal bool

	g globals
	// secrets are values (passwords, tokens) redacted from every message.
	secrets []string
	// globalsGiven are the global flags given before the command name,
	// which a relay's --config file must not override.
	globalsGiven map[string]bool
}

// globals are the settings every database command takes, from flags or the
// environment.
type globals struct {
	databaseURL string
	schema      string
	table       string
}

// run is outboxctl with its arguments (without the program name), its
// output streams and a context cancelled by SIGINT or SIGTERM. It returns
// the exit code. Everything the program does goes through here, so tests can
// run it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	a := &app{stdout: stdout, stderr: stderr, getenv: os.Getenv, terminal: isTerminal(stdout)}
	defer func() {
		// A bug must still end in one line, not a stack trace: the user can
		// do nothing with a trace, and it may print secrets held in memory.
		if v := recover(); v != nil {
			a.printErr(fmt.Errorf("internal error: %v (please report it at https://github.com/outboxkit/outboxkit/issues)", v))
			code = exitError
		}
	}()
	return a.main(ctx, args)
}

// isTerminal reports whether w is a character device (a terminal), as
// opposed to a pipe, a file or a test's buffer.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (a *app) main(ctx context.Context, args []string) int {
	a.g = globals{
		databaseURL: a.getenv("DATABASE_URL"),
		schema:      envOr(a.getenv, "OUTBOX_SCHEMA", "public"),
		table:       envOr(a.getenv, "OUTBOX_TABLE", "outbox_events"),
	}
	fs := a.newFlagSet("", "[global flags] <command> [flags]", topHelpText())
	a.registerGlobals(fs)
	rest, err := a.parse(fs, args)
	a.globalsGiven = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { a.globalsGiven[f.Name] = true })
	if err == nil && len(rest) == 0 {
		a.usage(fs)
		err = usageError("no command given: pick one of " + commandNames())
	}
	if err == nil {
		err = a.dispatch(ctx, rest[0], rest[1:])
	}
	return a.exit(err)
}

// command is a subcommand: its name, a one-line summary for the command
// list, and the function that parses its flags and runs it.
type command struct {
	name    string
	summary string
	run     func(a *app, ctx context.Context, args []string) error
}

// commands lists the subcommands in the order --help shows them.
var commands = []command{
	{"migrate", "apply, print, inspect or revert the outbox schema migrations", (*app).cmdMigrate},
	{"relay", "relay events from the outbox to QStash, NATS JetStream or AMQP until stopped", (*app).cmdRelay},
	{"status", "show pending, leased and dead-lettered counts; --max-age makes it a health check", (*app).cmdStatus},
	{"dlq", "list, show, replay or purge dead-lettered events", (*app).cmdDLQ},
	{"replay", "put published or dead-lettered events back to pending, keeping their IDs", (*app).cmdReplay},
	{"prune", "delete old published events (and, with --processed, old processed-event records)", (*app).cmdPrune},
	{"reconcile", "check that a consumer applied every published event; --replay-missing replays those it did not", (*app).cmdReconcile},
	{"doctor", "find what makes the outbox slow or stuck (vacuum, xmin horizon, slots, plans, indexes) and what to do", (*app).cmdDoctor},
	{"qstash-dev", "run the in-memory QStash server for local development", (*app).cmdQStashDev},
	{"dashboard", "serve the operators' web page: overview, events, dead-letter replay and purge", (*app).cmdDashboard},
}

// topHelpText is the top-level help with the command list filled in.
func topHelpText() string {
	var b strings.Builder
	for i, c := range commands {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "  %-11s %s", c.name, c.summary)
	}
	return strings.ReplaceAll(topHelp, "{{commands}}", b.String())
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

func (a *app) dispatch(ctx context.Context, name string, args []string) error {
	if name == "help" {
		if len(args) > 0 {
			// "outboxctl help relay" is "outboxctl relay --help".
			return a.dispatch(ctx, args[0], []string{"--help"})
		}
		fs := a.newFlagSet("", "[global flags] <command> [flags]", topHelpText())
		a.registerGlobals(fs)
		a.usage(fs)
		return nil
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(a, ctx, args)
		}
	}
	return usageError(fmt.Sprintf("unknown command %q: pick one of %s (outboxctl --help describes them)", name, commandNames()))
}

// registerGlobals adds the global flags to fs. Every subcommand registers
// them too, so they may come before or after the command name.
func (a *app) registerGlobals(fs *flagSet) {
	fs.StringVar(&a.g.databaseURL, "database-url", a.g.databaseURL,
		"PostgreSQL `URL` (env DATABASE_URL; when neither is set, the local development database "+localDatabaseURL+", with a warning)")
	fs.StringVar(&a.g.schema, "schema", a.g.schema, "`schema` holding the outbox tables (env OUTBOX_SCHEMA)")
	fs.StringVar(&a.g.table, "table", a.g.table, "outbox `table` name; the other tables are named after it (env OUTBOX_TABLE)")
}

// exit prints err (if any) as one line and returns the exit code.
func (a *app) exit(err error) int {
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return exitOK
	case errors.Is(err, errCheckFailed):
		a.printErr(err)
		return exitCheckFailed
	default:
		a.printErr(err)
		return exitError
	}
}

const topHelp = `outboxctl operates an outboxkit outbox on PostgreSQL: migrations, relays,
health checks, dead letters, replays and retention.

Commands:
{{commands}}

Run "outboxctl <command> --help" for a command's flags. Global flags may come
before or after the command name.

Environment: DATABASE_URL, OUTBOX_SCHEMA, OUTBOX_TABLE (global flags);
QSTASH_URL, QSTASH_TOKEN, NATS_URL, AMQP_URL (relay). A flag beats its
variable.

Without --database-url or DATABASE_URL, outboxctl connects to the local
development database (` + localDatabaseURL + `) and says so on stderr:
set DATABASE_URL in production.

Exit codes: 0 success; 1 a check failed (status --max-age: the oldest pending
event is too old); 2 any error (bad flags, unreachable services, failed
operations).`
