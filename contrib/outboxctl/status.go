package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

const statusHelp = `Shows the outbox at a glance: pending events (waiting or retrying), the age
of the oldest one, events leased by a relay right now, dead-lettered events,
and how many pending events have been tried how many times. Ages are
measured with the database's clock.

It also reports the schema's migrations, and exits 2 when some are missing
(after a migrate down, or before migrate ran): relays refuse to start then.

With --max-age, status is a health check: it exits 1 when the oldest pending
event has waited longer than the given duration (relays stuck, too slow or
not running), 0 otherwise, and 2 when it cannot tell (database unreachable,
schema not migrated). Use it as an alert, a cron check or a readiness probe:

  outboxctl status --max-age 5m || page-someone`

// statusJSON is the --json document. Field names are snake_case and ages
// are seconds, which is what alerting pipelines (jq, Prometheus textfile
// collectors) handle best.
type statusJSON struct {
	Schema                  string           `json:"schema"`
	Table                   string           `json:"table"`
	Pending                 int64            `json:"pending"`
	OldestPendingAt         *time.Time       `json:"oldest_pending_at"`
	OldestPendingAgeSeconds float64          `json:"oldest_pending_age_seconds"`
	Leased                  int64            `json:"leased"`
	DeadLettered            int64            `json:"dead_lettered"`
	Attempts                map[string]int64 `json:"attempts"`
	MaxAgeSeconds           *float64         `json:"max_age_seconds,omitempty"`
	Healthy                 *bool            `json:"healthy,omitempty"`
	Migrations              migrationState   `json:"migrations"`
}

func (a *app) cmdStatus(ctx context.Context, args []string) error {
	fs := a.newFlagSet("status", "[--json] [--max-age DURATION]", statusHelp)
	a.registerGlobals(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	var maxAge time.Duration
	newDurationFlag(fs, &maxAge, "max-age", 0, "exit 1 when the oldest pending event is older than this (e.g. 5m, 1h, 1d)")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if maxAge == 0 && flagGiven(fs, "max-age") {
		// Zero used to mean "no check" and exit 0 whatever the outbox held.
		return usageError("--max-age 0s would call any pending event stale: give the age beyond which the oldest pending event means trouble, such as 5m")
	}
	pool, store, err := a.openStore(ctx, 0, postgres.Config{})
	if err != nil {
		return err
	}
	defer pool.Close()
	// A schema behind its migrations makes relays refuse to start, so
	// status must not call it healthy.
	ms, err := a.migrationState(ctx, pool)
	if err != nil {
		return err
	}
	st, err := store.Stats(ctx)
	if err != nil {
		if !ms.Current {
			return a.notMigrated(ms)
		}
		return a.dbError(err)
	}
	stale := maxAge > 0 && st.OldestPendingAge > maxAge

	if *asJSON {
		out := statusJSON{
			Schema: a.g.schema, Table: a.g.table,
			Pending: st.Pending, OldestPendingAgeSeconds: st.OldestPendingAge.Seconds(),
			Leased: st.Leased, DeadLettered: st.DeadLettered,
			Attempts:   make(map[string]int64, len(st.Attempts)),
			Migrations: ms,
		}
		if !st.OldestPendingAt.IsZero() {
			t := st.OldestPendingAt.UTC()
			out.OldestPendingAt = &t
		}
		for k, v := range st.Attempts {
			out.Attempts[strconv.Itoa(k)] = v
		}
		if maxAge > 0 {
			s, healthy := maxAge.Seconds(), !stale
			out.MaxAgeSeconds, out.Healthy = &s, &healthy
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		a.printStatus(st, ms)
	}
	if !ms.Current {
		return a.notMigrated(ms)
	}
	if stale {
		return checkFailed("the oldest pending event has waited %s, over --max-age %s: check that relays run and can reach the transport",
			formatDuration(st.OldestPendingAge), formatDuration(maxAge))
	}
	return nil
}

func (a *app) printStatus(st core.Stats, ms migrationState) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "outbox:\t%s.%s\n", a.g.schema, a.g.table)
	fmt.Fprintf(tw, "pending:\t%d\n", st.Pending)
	if st.OldestPendingAt.IsZero() {
		fmt.Fprintf(tw, "oldest pending age:\t-\n")
	} else {
		fmt.Fprintf(tw, "oldest pending age:\t%s (created %s)\n", formatDuration(st.OldestPendingAge), st.OldestPendingAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "leased:\t%d\n", st.Leased)
	fmt.Fprintf(tw, "dead-lettered:\t%d\n", st.DeadLettered)
	fmt.Fprintf(tw, "attempts:\t%s\n", attemptsLine(st.Attempts))
	fmt.Fprintf(tw, "migrations:\t%d of %d applied", ms.Applied, ms.Known)
	if !ms.Current {
		fmt.Fprintf(tw, "; missing %v: relays refuse to start", ms.Missing)
	}
	fmt.Fprintln(tw)
	_ = tw.Flush()
}

// attemptsLine prints the attempts distribution as "0:12 1:3 4:1" (attempt
// count : pending events), sorted by attempts.
func attemptsLine(m map[int]int64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d:%d", k, m[k])
	}
	return strings.Join(parts, " ") + "  (attempts:events)"
}
