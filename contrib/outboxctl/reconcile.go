package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
)

const reconcileHelp = `Checks that a consumer applied every event the outbox published: it reads
the outbox's published events written in the window and the consumer's
processed-event records (its Deduper's, or its Sequencer's positions), page
by page in bounded memory, and reports

  applied        published, and the consumer has a record
  missing        published more than --grace ago, and no record: lost
  in flight      published within --grace, no record yet
  pending        written in the window, not yet published (see status)
  dead-lettered  the outbox gave up on them (see dlq list)
  phantoms       records of the consumer's whose event the outbox never held

The consumer's records may live in another database: --consumer-database-url
(and --consumer-schema/--consumer-table where its Deduper's schema and
table differ). With a QStash token (--qstash-token or QSTASH_TOKEN) each
missing event also gets QStash's state: in its DLQ (with the last
response), still retrying, or neither, which means QStash delivered it and
the consumer acknowledged without recording it (or QStash's logs no longer
reach back that far).

--replay-missing puts exactly the missing events back to pending, with
their IDs, so relays deliver them again; consumers that did apply one skip
it.

  outboxctl reconcile --consumer billing --since 24h
  outboxctl reconcile --consumer billing --since 2025-01-31T14:00:00Z --until 2025-01-31T15:00:00Z --json
  outboxctl reconcile --consumer billing --consumer-database-url "$BILLING_DATABASE_URL" --replay-missing

--since and --until take an RFC 3339 time or a duration before now (24h,
7d); --since defaults to 24h, --until to now. Exit codes: 0 nothing is
missing and no phantom; 1 events are missing past --grace or phantoms
exist (even once --replay-missing replayed them: it is a finding); 2 the
check could not run.`

func (a *app) cmdReconcile(ctx context.Context, args []string) error {
	fs := a.newFlagSet("reconcile", "--consumer NAME [--since T] [--until T] [--grace D] [--consumer-database-url URL] [--json] [--replay-missing]", reconcileHelp)
	a.registerGlobals(fs)
	consumer := fs.String("consumer", "", "the consumer's `name`, as its Deduper records it (qstash.ReceiverConfig.Consumer); required")
	since := fs.String("since", "24h", "check events written at or after this RFC 3339 `time`, or this long ago (24h, 7d)")
	until := fs.String("until", "", "check events written before this RFC 3339 `time`, or this long ago; default: now")
	var grace time.Duration
	newDurationFlag(fs, &grace, "grace", postgres.DefaultReconcileGrace, "how long after its publish an event may still be on its way (0 for none)")
	consumerURL := fs.String("consumer-database-url", a.getenv("OUTBOX_CONSUMER_DATABASE_URL"),
		"the consumer's PostgreSQL `URL`, where its processed records are (env OUTBOX_CONSUMER_DATABASE_URL); default: --database-url")
	consumerSchema := fs.String("consumer-schema", "", "`schema` of the consumer's Deduper (default: --schema)")
	consumerTable := fs.String("consumer-table", "", "`table` the consumer's Deduper is named after, its records being <table>_processed (default: --table)")
	qstashURL := fs.String("qstash-url", envOr(a.getenv, "QSTASH_URL", qstash.DefaultBaseURL), "QStash API `URL` (env QSTASH_URL)")
	qstashToken := fs.String("qstash-token", a.getenv("QSTASH_TOKEN"), "QStash `token` (env QSTASH_TOKEN): look the missing events up in QStash's DLQ and logs; empty for no lookup")
	limit := fs.Int("limit", postgres.DefaultReconcileMaxListed, "most events of each kind to list (the counts are complete); 0 lists all")
	asJSON := fs.Bool("json", false, "print JSON")
	replayMissing := fs.Bool("replay-missing", false, "replay exactly the missing events (IDs kept) once the check is done")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if *consumer == "" {
		return usageError("--consumer is required: the name the consumer records its events under (its Deduper's or Receiver's Consumer)")
	}
	if *limit < 0 {
		return usageError("--limit must be 0 (all) or positive")
	}
	now := time.Now()
	sinceT, err := pointInTime("since", *since, now)
	if err != nil {
		return err
	}
	untilT, err := pointInTime("until", *until, now)
	if err != nil {
		return err
	}
	if !sinceT.IsZero() && !untilT.IsZero() && !untilT.After(sinceT) {
		return usageError("--until must be after --since")
	}
	cfg := postgres.ReconcileConfig{
		Schema: a.g.schema, Table: a.g.table, ConsumerSchema: *consumerSchema, ConsumerTable: *consumerTable,
		Consumer: *consumer, Since: sinceT, Until: untilT, Grace: grace, MaxListed: *limit,
	}
	if grace == 0 {
		cfg.Grace = -1 // the flag's 0 is "no grace"; the config's is "the default"
	}
	if *limit == 0 {
		cfg.MaxListed = -1
	}
	if *qstashToken != "" {
		a.addSecret(*qstashToken)
		a.addURLSecrets(*qstashURL)
		cfg.Transport = newQStashLog(*qstashURL, *qstashToken, sinceT, &http.Client{Timeout: 30 * time.Second})
	}
	var missing []core.ID
	if *replayMissing {
		cfg.OnMissing = func(_ context.Context, evs []postgres.ReconcileEvent) error {
			for _, e := range evs {
				missing = append(missing, e.ID)
			}
			return nil
		}
	}

	pool, store, err := a.openStore(ctx, 2, postgres.Config{})
	if err != nil {
		return err
	}
	defer pool.Close()
	consumerPool := pool
	if *consumerURL != "" {
		if consumerPool, err = a.connectURL(ctx, *consumerURL, 2, false); err != nil {
			return a.consumerDBError(err, *consumerURL, cfg)
		}
		defer consumerPool.Close()
	}
	rep, err := postgres.Reconcile(ctx, pool, consumerPool, &cfg)
	if err != nil {
		// The library says "consumer's" of what it found (or failed to
		// read) on the consumer's side.
		if strings.Contains(err.Error(), "consumer's") {
			return a.consumerDBError(err, orDefault(*consumerURL, a.g.databaseURL), cfg)
		}
		return a.dbError(err)
	}

	var replayed *int64
	if *replayMissing && len(missing) > 0 {
		n, err := a.replay(ctx, store, core.ReplayFilter{IDs: missing})
		if err != nil {
			return err
		}
		replayed = &n
	}
	if *asJSON {
		out := reconcileJSON{
			Schema: a.g.schema, Table: a.g.table,
			ConsumerSchema: orDefault(*consumerSchema, a.g.schema), ConsumerTable: orDefault(*consumerTable, a.g.table),
			ReconcileReport: rep, GraceSeconds: rep.Grace.Seconds(), OK: rep.OK(), Replayed: replayed,
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		a.printReconcile(rep, cfg.Transport != nil)
	}
	for _, w := range rep.Warnings {
		a.warn("%s", w)
	}
	if rep.TransportError != "" {
		a.warn("the QStash lookup failed, so missing events carry no QStash state: %s", rep.TransportError)
	}
	if replayed != nil {
		fmt.Fprintf(a.stderr, "outboxctl: replayed %d of the %d missing event(s); IDs kept, so consumers skip those they did apply\n", *replayed, len(missing))
		if window, _ := dedupWindow("qstash"); grace < window {
			a.warn("with --grace under %s, QStash (or JetStream, within its window) may drop replayed events published that recently as duplicates of themselves: run reconcile again after the window", formatDuration(window))
		}
	}
	if !rep.OK() {
		var parts []string
		if rep.Missing > 0 {
			parts = append(parts, fmt.Sprintf("%d event(s) published more than %s ago were not applied by consumer %q", rep.Missing, formatDuration(rep.Grace), rep.Consumer))
		}
		if rep.Phantoms > 0 {
			parts = append(parts, fmt.Sprintf("%d record(s) of consumer %q belong to no event of the outbox", rep.Phantoms, rep.Consumer))
		}
		hint := "replay them with --replay-missing (or outboxctl replay --id ...) once the consumer is fixed; phantoms point at an effect applied without an event: find who wrote them"
		if replayed != nil {
			hint = "the missing ones were replayed; run reconcile again once relays delivered them"
		}
		return checkFailed("%s: %s", strings.Join(parts, "; "), hint)
	}
	return nil
}

// reconcileJSON is the --json document: the library's report, whose
// fields are snake_case already, with the command's settings.
type reconcileJSON struct {
	Schema         string `json:"schema"`
	Table          string `json:"table"`
	ConsumerSchema string `json:"consumer_schema"`
	ConsumerTable  string `json:"consumer_table"`
	*postgres.ReconcileReport
	GraceSeconds float64 `json:"grace_seconds"`
	OK           bool    `json:"ok"`
	// Replayed is how many missing events --replay-missing put back to
	// pending; absent without it.
	Replayed *int64 `json:"replayed,omitempty"`
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// consumerDBError explains an error of the consumer's database.
func (a *app) consumerDBError(err error, url string, cfg postgres.ReconcileConfig) error {
	schema, table := orDefault(cfg.ConsumerSchema, cfg.Schema), orDefault(cfg.ConsumerTable, cfg.Table)
	e := a.dbErrorAt(err, url, schema, table)
	if url != a.g.databaseURL {
		return fmt.Errorf("consumer database (--consumer-database-url): %w", e)
	}
	return fmt.Errorf("the consumer's records (--consumer-schema, --consumer-table): %w", e)
}

// pointInTime reads --since or --until: an RFC 3339 time, or a duration
// before now.
func pointInTime(flagName, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	var d time.Duration
	if err := (durationFlag{d: &d}).Set(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError(fmt.Sprintf("--%s %q is neither an RFC 3339 time such as 2025-01-31T14:00:00Z nor a duration before now such as 24h or 7d", flagName, s))
}

func (a *app) printReconcile(rep *postgres.ReconcileReport, transport bool) {
	w := a.stdout
	window := "from the beginning"
	if !rep.Since.IsZero() {
		window = "from " + rfc3339(rep.Since)
	}
	fmt.Fprintf(w, "consumer %q, outbox %s.%s: events written %s to %s, grace %s (checked %s)\n\n",
		rep.Consumer, a.g.schema, a.g.table, window, rfc3339(rep.Until), formatDuration(rep.Grace), rfc3339(rep.CheckedAt))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "published:\t%d\t\n", rep.Published)
	fmt.Fprintf(tw, "  applied:\t%d\t\n", rep.Applied)
	fmt.Fprintf(tw, "  missing:\t%d\tpublished more than %s ago, no record\n", rep.Missing, formatDuration(rep.Grace))
	fmt.Fprintf(tw, "  in flight:\t%d\tpublished within the grace, no record yet\n", rep.InFlight)
	fmt.Fprintf(tw, "pending:\t%d\tnot yet published (outboxctl status)\n", rep.Pending)
	fmt.Fprintf(tw, "dead-lettered:\t%d\t%d applied anyway (outboxctl dlq list)\n", rep.DeadLettered, rep.DeadAppliedAnyway)
	fmt.Fprintf(tw, "records:\t%d\tthe consumer's, processed in the window\n", rep.Records)
	fmt.Fprintf(tw, "  phantoms:\t%d\ta record without an event in the outbox\n", rep.Phantoms)
	_ = tw.Flush()

	if len(rep.MissingEvents) > 0 {
		fmt.Fprintf(w, "\nmissing events (%s):\n", listedOf(len(rep.MissingEvents), rep.Missing))
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTYPE\tCREATED\tPUBLISHED\tATTEMPTS\tQSTASH\tLAST ERROR")
		var inDLQ, moving, neither int
		for _, e := range rep.MissingEvents {
			state := "-"
			if st := e.Transport; st != nil {
				state = transportText(st)
				if st.DeadLettered {
					inDLQ++
				} else {
					moving++
				}
			} else if transport && rep.TransportError == "" {
				state = "delivered?"
				neither++
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Type, rfc3339(e.CreatedAt), rfc3339(e.PublishedAt), e.Attempts, state, shortText(orDefault(e.LastError, "-"), 80))
		}
		_ = tw.Flush()
		if transport && rep.TransportError == "" {
			fmt.Fprintf(w, "QStash: %d in its DLQ, %d still on their way, %d neither: QStash delivered those (as far as its logs reach back) and the consumer acknowledged without recording them\n", inDLQ, moving, neither)
		}
	}
	if len(rep.DeadLetters) > 0 {
		fmt.Fprintf(w, "\ndead letters (%s):\n", listedOf(len(rep.DeadLetters), rep.DeadLettered))
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTYPE\tDEAD AT\tATTEMPTS\tAPPLIED\tLAST ERROR")
		for _, e := range rep.DeadLetters {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%s\n", e.ID, e.Type, rfc3339(e.DeadAt), e.Attempts, e.Applied, shortText(orDefault(e.LastError, "-"), 80))
		}
		_ = tw.Flush()
	}
	if len(rep.PhantomRecords) > 0 {
		fmt.Fprintf(w, "\nphantom records (%s):\n", listedOf(len(rep.PhantomRecords), rep.Phantoms))
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT ID\tPROCESSED AT\tMAYBE PRUNED")
		for _, p := range rep.PhantomRecords {
			fmt.Fprintf(tw, "%s\t%s\t%v\n", p.EventID, rfc3339(p.ProcessedAt), p.MaybePruned)
		}
		_ = tw.Flush()
	}
	if rep.OK() {
		fmt.Fprintf(w, "\nnothing missing: every event published more than %s ago was applied\n", formatDuration(rep.Grace))
	}
}

// listedOf says how many of a list are shown.
func listedOf(listed int, total int64) string {
	if int64(listed) == total {
		return strconv.Itoa(listed)
	}
	return fmt.Sprintf("%d of %d; --limit 0 lists all", listed, total)
}

// transportText is a transport state in one cell.
func transportText(st *postgres.TransportState) string {
	var b strings.Builder
	b.WriteString(st.State)
	if st.DeadLettered {
		b.WriteString(" (in DLQ")
		if st.ResponseStatus != 0 {
			b.WriteString(", " + strconv.Itoa(st.ResponseStatus))
		}
		b.WriteString(")")
	} else if !st.NextDelivery.IsZero() {
		b.WriteString(" (next " + rfc3339(st.NextDelivery) + ")")
	}
	return b.String()
}

// shortText cuts s to n runes, on one line.
func shortText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
