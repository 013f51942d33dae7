package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/postgres"
)

// outboxChecks are doctor's checks of the outbox's own objects, which
// other tests sharing the server cannot disturb.
const outboxChecks = "migrations,indexes,table-bloat,pending-index,generic-plan,statistics,clock-skew"

func TestDoctorExitCodes(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	doctor := func(args ...string) (result, doctorJSON) {
		t.Helper()
		r := runCommand(t, env(), "doctor", o.args(append(args, "--json")...)...)
		var rep doctorJSON
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.DoctorReport == nil {
			t.Fatalf("doctor --json (exit %d): %v\nstdout:\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
		}
		return r, rep
	}

	r, rep := doctor("--checks", outboxChecks)
	wantOK(t, r)
	if !rep.Healthy || len(rep.Findings) != 0 || rep.FailOn != "warning" || rep.Schema != o.schema {
		t.Errorf("a healthy outbox: %s", r.stdout)
	}
	r = runCommand(t, env(), "doctor", o.args("--checks", outboxChecks)...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "no findings") {
		t.Errorf("text report: %s", r.stdout)
	}

	// Every check, on this server: its autovacuum setting is a finding
	// where it is off (as on CI's machine).
	var autovacuum string
	if err := o.pool.QueryRow(ctxT(t), "SHOW autovacuum").Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	r, rep = doctor("--fail-on", "never")
	wantOK(t, r)
	found := false
	for _, f := range rep.Findings {
		found = found || f.Check == postgres.CheckAutovacuum && f.Object == "server"
	}
	if found != (autovacuum == "off") {
		t.Errorf("autovacuum = %s, reported: %v:\n%s", autovacuum, found, r.stdout)
	}

	// A dropped slot index is a warning: exit 1, unless only critical
	// findings fail the check.
	o.exec(t, `DROP INDEX "`+o.schema+`".outbox_events_slot_idx`)
	r, rep = doctor("--checks", outboxChecks)
	wantOneLineError(t, r, exitCheckFailed, "1 finding(s) at warning or worse", "index "+o.schema+".outbox_events_slot_idx is missing")
	if rep.Healthy || len(rep.Findings) != 1 || rep.Findings[0].Severity != postgres.SeverityWarning {
		t.Errorf("slot index dropped: %s", r.stdout)
	}
	wantOK(t, runCommand(t, env(), "doctor", o.args("--checks", outboxChecks, "--fail-on", "critical")...))
	// A dropped pending index is critical.
	o.exec(t, `DROP INDEX "`+o.schema+`".outbox_events_pending_idx`)
	r, _ = doctor("--checks", outboxChecks, "--fail-on", "critical")
	wantOneLineError(t, r, exitCheckFailed, "1 finding(s) at critical or worse", "outbox_events_pending_idx")
	r = runCommand(t, env(), "doctor", o.args("--checks", outboxChecks)...)
	for _, want := range []string{"CRITICAL  indexes  index " + o.schema + ".outbox_events_pending_idx", "fix: recreate it without blocking writers: CREATE INDEX CONCURRENTLY",
		"SKIPPED   pending-index", "2 finding(s): 1 critical, 1 warning"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, r.stdout)
		}
	}

	// Bad flags and an unreachable database are errors (2), not findings.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--fail-on", "sometimes"}, `--fail-on "sometimes": use info, warning, critical or never`},
		{[]string{"--checks", "vibes"}, `--checks: unknown check "vibes"`},
		{[]string{"--cheap", "--checks", "indexes"}, "--cheap and --checks both choose the checks"},
		{[]string{"--slot-wal", "lots"}, `--slot-wal "lots"`},
		{[]string{"--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2"}, "cannot reach PostgreSQL"},
	} {
		wantOneLineError(t, runCommand(t, env(), "doctor", o.args(c.args...)...), exitError, c.want)
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1GiB": 1 << 30, "512MiB": 512 << 20, "512 MB": 512 << 20, "4096": 4096, "10kb": 10 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1GiB", "1.5GiB", "GiB", "99999999999TiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

func TestReconcileAndDoctorHelp(t *testing.T) {
	t.Parallel()
	for cmd, flags := range map[string][]string{
		"reconcile": {"--consumer", "--since", "--until", "--grace", "--consumer-database-url", "--consumer-schema", "--consumer-table",
			"--qstash-url", "--qstash-token", "--limit", "--json", "--replay-missing", "--database-url", "--schema", "--table"},
		"doctor": {"--json", "--fail-on", "--checks", "--cheap", "--ordering", "--destinations", "--long-transaction",
			"--idle-in-transaction", "--max-clock-skew", "--slot-wal", "--database-url", "--schema", "--table"},
	} {
		// A token in the environment is shown as set, never printed.
		r := runCommand(t, env("QSTASH_TOKEN=secret-token-value"), cmd, "--help")
		wantOK(t, r)
		if !strings.HasPrefix(r.stdout, "Usage: outboxctl "+cmd+" ") || strings.Contains(r.stdout, "secret-token-value") {
			t.Errorf("%s --help:\n%s", cmd, r.stdout)
		}
		for _, f := range flags {
			if !strings.Contains(r.stdout, "\n  "+f+" ") && !strings.Contains(r.stdout, "\n  "+f+"\n") {
				t.Errorf("%s --help does not document %s:\n%s", cmd, f, r.stdout)
			}
		}
	}
}
