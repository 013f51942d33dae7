package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

const doctorHelp = `Checks what makes an outbox slow or stuck, and says what to do about each
finding: transactions, prepared transactions, replication slots and standbys
holding back the xmin horizon (with their age and PID); sessions idle in a
transaction; autovacuum off, disabled on the table, or not reaching it;
dead row versions in the table and at the head of the pending index; a
generic plan of the relays' claim that scans the table; planner statistics
missing or stale; indexes missing or invalid for the features in use
(--ordering, --destinations); replication slots retaining WAL; this host's
clock against the database's; migrations behind.

It changes nothing. Some checks look at the whole database or server, so
they report other applications' sessions and slots too: those hold back
the outbox's vacuum all the same. Give the role pg_monitor to see other
roles' sessions.

Exit codes, for CI and cron: 0 no finding at or above --fail-on (default
warning); 1 at least one; 2 the check could not run (database unreachable,
bad flags).

  outboxctl doctor                       # the report, worst first
  outboxctl doctor --json                # for scripts and dashboards
  outboxctl doctor --fail-on critical    # page only on what stops the outbox
  outboxctl doctor --cheap               # catalogs and statistics only (no EXPLAIN)`

// doctorJSON is the --json document.
type doctorJSON struct {
	*postgres.DoctorReport
	FailOn string `json:"fail_on"`
	// Healthy is false when a finding is at or above FailOn: the exit
	// code is 1 then.
	Healthy bool `json:"healthy"`
}

func (a *app) cmdDoctor(ctx context.Context, args []string) error {
	fs := a.newFlagSet("doctor", "[--json] [--fail-on SEVERITY] [--checks NAME,...] [--cheap] [--ordering] [--destinations]", doctorHelp)
	a.registerGlobals(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	failOn := fs.String("fail-on", "warning", "exit 1 when a finding is of this `severity` or worse: info, warning, critical, or never")
	var checks listFlag
	fs.Var(&checks, "checks", "run only these `checks` (comma-separated): "+strings.Join(postgres.AllChecks(), ", "))
	cheap := fs.Bool("cheap", false, "only the checks that read catalogs and statistics views (no EXPLAIN, no index scan)")
	ordering := fs.Bool("ordering", false, "the relays run with --ordering: the aggregate index is required")
	destinations := fs.Bool("destinations", false, "relays claim by destination (--only-destination): an index led by the destination is wanted")
	var longTx, idleTx, skew time.Duration
	newDurationFlag(fs, &longTx, "long-transaction", postgres.DefaultLongTransaction, "report transactions holding back the xmin horizon from this age")
	newDurationFlag(fs, &idleTx, "idle-in-transaction", postgres.DefaultIdleInTransaction, "report sessions idle in a transaction for this long")
	newDurationFlag(fs, &skew, "max-clock-skew", postgres.DefaultMaxClockSkew, "report this host's clock when it is this far from the database's")
	slotWAL := fs.String("slot-wal", "1GiB", "report replication slots retaining this much WAL (`size`: 512MiB, 1GiB, or bytes)")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	var threshold postgres.Severity
	if f := strings.ToLower(*failOn); f != "never" {
		var err error
		if threshold, err = postgres.ParseSeverity(f); err != nil {
			return usageError(fmt.Sprintf("--fail-on %q: use info, warning, critical or never", *failOn))
		}
	}
	if *cheap && len(checks) > 0 {
		return usageError("--cheap and --checks both choose the checks: give one of them")
	}
	all := postgres.AllChecks()
	for _, c := range checks {
		if !contains(all, c) {
			return usageError(fmt.Sprintf("--checks: unknown check %q: use %s", c, strings.Join(all, ", ")))
		}
	}
	walBytes, err := parseSize(*slotWAL)
	if err != nil {
		return usageError(fmt.Sprintf("--slot-wal %q: %v", *slotWAL, err))
	}
	cfg := postgres.DoctorConfig{
		Schema: a.g.schema, Table: a.g.table, Ordering: *ordering, Destinations: *destinations, Checks: checks,
		LongTransaction: longTx, IdleInTransaction: idleTx, MaxClockSkew: skew, SlotRetainedWAL: walBytes,
	}
	if *cheap {
		cfg.Checks = postgres.CheapChecks()
	}
	pool, err := a.connect(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := postgres.Doctor(ctx, pool, &cfg)
	if err != nil {
		return a.dbError(err)
	}
	failing := 0
	if threshold != 0 {
		failing = len(rep.AtLeast(threshold))
	}
	if *asJSON {
		if err := writeJSON(a.stdout, doctorJSON{DoctorReport: rep, FailOn: strings.ToLower(*failOn), Healthy: failing == 0}); err != nil {
			return err
		}
	} else {
		a.printDoctor(rep)
	}
	if failing > 0 {
		worst := rep.Findings[0]
		return checkFailed("%d finding(s) at %s or worse, the worst: [%s] %s: %s", failing, threshold, worst.Severity, worst.Object, worst.Summary)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (a *app) printDoctor(rep *postgres.DoctorReport) {
	w := a.stdout
	fmt.Fprintf(w, "outbox %s.%s, checked %s\n", rep.Schema, rep.Table, rfc3339(rep.CheckedAt))
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "\nno findings")
	}
	bySeverity := map[postgres.Severity]int{}
	for _, f := range rep.Findings {
		bySeverity[f.Severity]++
		fmt.Fprintf(w, "\n%-8s  %s  %s\n", strings.ToUpper(f.Severity.String()), f.Check, f.Object)
		fmt.Fprintf(w, "          %s\n", f.Summary)
		fmt.Fprintf(w, "          fix: %s\n", f.Fix)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "\nSKIPPED   %s: %s\n", s.Check, s.Reason)
	}
	if len(rep.Findings) > 0 {
		var parts []string
		for _, s := range []postgres.Severity{postgres.SeverityCritical, postgres.SeverityWarning, postgres.SeverityInfo} {
			if n := bySeverity[s]; n > 0 {
				parts = append(parts, strconv.Itoa(n)+" "+s.String())
			}
		}
		fmt.Fprintf(w, "\n%d finding(s): %s\n", len(rep.Findings), strings.Join(parts, ", "))
	}
}

// parseSize reads a byte size: a number with an optional binary unit (KiB,
// MiB, GiB, TiB; KB, MB, GB, TB are read as the same).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	lower := strings.ToLower(t)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}, {"tb", 1 << 40}, {"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"b", 1}} {
		if strings.HasSuffix(lower, u.suffix) {
			mult, t = u.mult, strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("give a positive size such as 512MiB, 1GiB or 1073741824")
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("too large")
	}
	return n * mult, nil
}
