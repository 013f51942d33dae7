package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

const dlqHelp = `Dead-lettered events failed for good (a permanent error, or --max-attempts
reached). They stay in the outbox, with their last error, until replayed or
purged; retention (prune) never deletes them.

  outboxctl dlq list [--limit N] [--after ID] [--json]
  outboxctl dlq show --id ID [--json]
  outboxctl dlq replay --id ID,... | --all
  outboxctl dlq purge --id ID,... | --all --yes

Fix the cause (a consumer bug, a missing route), then replay: the events
keep their IDs, so consumers that applied one already skip it.`

func (a *app) cmdDLQ(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dlq", "list|show|replay|purge [flags]", dlqHelp)
	a.registerGlobals(fs)
	rest, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usageError("dlq needs a subcommand: list, show, replay or purge (see outboxctl dlq --help)")
	}
	switch rest[0] {
	case "list", "ls":
		return a.dlqList(ctx, rest[1:])
	case "show":
		return a.dlqShow(ctx, rest[1:])
	case "replay":
		return a.dlqReplay(ctx, rest[1:])
	case "purge":
		return a.dlqPurge(ctx, rest[1:])
	}
	return usageError(fmt.Sprintf("unknown dlq subcommand %q: use list, show, replay or purge", rest[0]))
}

// dlqPage is how many records one DeadLetters call fetches when listing
// everything.
const dlqPage = 500

func (a *app) dlqList(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dlq list", "[--limit N] [--after ID] [--json]",
		"Lists dead-lettered events in ID order (which is creation order for UUID v7 IDs).\n"+
			"When more remain, a hint on stderr gives the --after for the next page.")
	a.registerGlobals(fs)
	limit := fs.Int("limit", 100, "most events to list; 0 lists all")
	after := fs.String("after", "", "list events with IDs after this `ID` (the last ID of the previous page)")
	asJSON := fs.Bool("json", false, "print a JSON array of full records (payload and headers included)")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		return usageError("--limit must be 0 (all) or positive")
	}
	var cursor core.ID
	if *after != "" {
		ids, err := parseIDs([]string{*after})
		if err != nil {
			return usageError(strings.Replace(err.Error(), "--id", "--after", 1))
		}
		cursor = ids[0]
	}
	pool, store, err := a.openStore(ctx, 0, postgres.Config{})
	if err != nil {
		return err
	}
	defer pool.Close()

	var recs []postgres.Record
	more := false
	for {
		want := dlqPage
		if *limit > 0 {
			// One extra tells whether another page exists.
			want = min(dlqPage, *limit-len(recs)+1)
		}
		page, err := store.DeadLetters(ctx, want, cursor)
		if err != nil {
			return a.dbError(err)
		}
		recs = append(recs, page...)
		if *limit > 0 && len(recs) > *limit {
			recs, more = recs[:*limit], true
			break
		}
		if len(page) < want {
			break
		}
		cursor = page[len(page)-1].ID
	}

	if *asJSON {
		out := make([]recordJSON, len(recs))
		for i, r := range recs {
			out[i] = a.toRecordJSON(r)
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else if len(recs) == 0 {
		fmt.Fprintf(a.stdout, "no dead-lettered events in %s.%s\n", a.g.schema, a.g.table)
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTYPE\tAGGREGATE\tATTEMPTS\tDEAD AT\tLAST ERROR")
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Type, aggregateOf(r.Event), r.Attempts, rfc3339(r.DeadAt), truncate(a.redact(oneLine(r.LastError)), 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if more {
		fmt.Fprintf(a.stderr, "outboxctl: more dead letters remain: outboxctl dlq list --after %s\n", recs[len(recs)-1].ID)
	}
	return nil
}

func (a *app) dlqShow(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dlq show", "--id ID [--json]", "Shows one event in full: state, attempts, last error, headers and payload.\nIt works for an event in any state, not only dead-lettered ones.")
	a.registerGlobals(fs)
	idFlag := fs.String("id", "", "the event `ID` (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if *idFlag == "" {
		return usageError("dlq show needs --id ID (outboxctl dlq list shows the IDs)")
	}
	ids, err := parseIDs([]string{*idFlag})
	if err != nil {
		return err
	}
	pool, store, err := a.openStore(ctx, 0, postgres.Config{})
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := store.Get(ctx, ids[0])
	if errors.Is(err, postgres.ErrNotFound) {
		return fmt.Errorf("no event %s in %s.%s: check the ID, --schema and --table", ids[0], a.g.schema, a.g.table)
	}
	if err != nil {
		return a.dbError(err)
	}
	if *asJSON {
		return writeJSON(a.stdout, a.toRecordJSON(r))
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", r.ID.String())
	row("type", r.Type)
	row("state", string(r.State))
	row("schema version", fmt.Sprint(r.SchemaVersion))
	row("source", r.Source)
	row("aggregate", aggregateOf(r.Event))
	if r.Sequence != 0 {
		row("sequence", fmt.Sprint(r.Sequence))
	}
	row("destination", a.redact(r.Destination))
	row("attempts", fmt.Sprint(r.Attempts))
	row("created at", rfc3339(r.CreatedAt))
	row("available at", rfc3339(r.AvailableAt))
	if !r.PublishedAt.IsZero() {
		row("published at", rfc3339(r.PublishedAt))
	}
	if !r.DeadAt.IsZero() {
		row("dead at", rfc3339(r.DeadAt))
	}
	if !r.LeaseUntil.IsZero() {
		row("lease until", rfc3339(r.LeaseUntil))
	}
	row("last error", a.redact(oneLine(r.LastError)))
	for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
		row("header "+k, r.Headers[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, r.Payload, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(r.Payload)
	}
	fmt.Fprintf(a.stdout, "payload:\n%s\n", pretty.String())
	return nil
}

func (a *app) dlqReplay(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dlq replay", "--id ID,... | --all",
		"Puts dead-lettered events back to pending with their IDs kept and attempts reset,\nso relays deliver them again. Published events are not touched (see outboxctl replay).")
	a.registerGlobals(fs)
	sel := selectDeadLetters(fs, "replay")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	f, pool, store, err := a.openSelection(ctx, sel)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := a.replay(ctx, store, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "replayed %d dead-lettered event(s); IDs kept, so consumers skip those they already applied\n", n)
	if len(f.IDs) > 0 && n < int64(len(f.IDs)) {
		a.warn("%d of the %d IDs were not dead-lettered (pending, published or unknown) and were left alone", int64(len(f.IDs))-n, len(f.IDs))
	}
	return nil
}

func (a *app) dlqPurge(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dlq purge", "--id ID,... | --all --yes",
		"Deletes dead-lettered events for good. Without --yes it only says how many it\nwould delete.")
	a.registerGlobals(fs)
	sel := selectDeadLetters(fs, "purge")
	yes := fs.Bool("yes", false, "confirm the deletion")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	f, pool, store, err := a.openSelection(ctx, sel)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !*yes {
		n, err := countDead(ctx, store, f)
		if err != nil {
			return a.dbError(err)
		}
		return usageError(fmt.Sprintf("dlq purge would delete %d dead-lettered event(s) for good: add --yes to confirm", n))
	}
	n, err := store.Purge(ctx, f)
	if err != nil {
		return a.dbError(err)
	}
	fmt.Fprintf(a.stdout, "purged %d dead-lettered event(s)\n", n)
	return nil
}

// dlqFilter builds the filter of dlq replay and purge: dead letters only,
// by ID or all of them.
// deadLetterSelection is the --id / --all choice of the dlq commands that
// act on dead letters (replay, purge).
type deadLetterSelection struct {
	verb string
	ids  listFlag
	all  *bool
}

func selectDeadLetters(fs *flagSet, verb string) *deadLetterSelection {
	sel := &deadLetterSelection{verb: verb}
	fs.Var(&sel.ids, "id", "dead-lettered event `IDs` (repeatable, or comma-separated)")
	sel.all = fs.Bool("all", false, verb+" every dead-lettered event")
	return sel
}

// openSelection checks the selection and opens the store it applies to.
func (a *app) openSelection(ctx context.Context, sel *deadLetterSelection) (core.ReplayFilter, *pgxpool.Pool, *postgres.Store, error) {
	f, err := dlqFilter(sel.verb, sel.ids, *sel.all)
	if err != nil {
		return core.ReplayFilter{}, nil, nil, err
	}
	pool, store, err := a.openStore(ctx, 0, postgres.Config{})
	if err != nil {
		return core.ReplayFilter{}, nil, nil, err
	}
	return f, pool, store, nil
}

func dlqFilter(verb string, ids listFlag, all bool) (core.ReplayFilter, error) {
	switch {
	case len(ids) == 0 && !all:
		return core.ReplayFilter{}, usageError(fmt.Sprintf("dlq %s needs --id ID,... or --all", verb))
	case len(ids) > 0 && all:
		return core.ReplayFilter{}, usageError(fmt.Sprintf("dlq %s takes --id or --all, not both", verb))
	}
	parsed, err := parseIDs(ids)
	if err != nil {
		return core.ReplayFilter{}, err
	}
	// DeadOnly alone is a complete filter: every dead letter.
	return core.ReplayFilter{IDs: parsed, DeadOnly: true}, nil
}

// countDead counts the dead letters a dlq filter matches, for purge's
// confirmation message.
func countDead(ctx context.Context, store *postgres.Store, f core.ReplayFilter) (int64, error) {
	if len(f.IDs) == 0 {
		st, err := store.Stats(ctx)
		return st.DeadLettered, err
	}
	var n int64
	for _, id := range f.IDs {
		r, err := store.Get(ctx, id)
		if errors.Is(err, postgres.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if r.State == postgres.StateDeadLettered {
			n++
		}
	}
	return n, nil
}

// recordJSON is an event as list --json and show --json print it.
type recordJSON struct {
	ID            string            `json:"id"`
	Type          string            `json:"type"`
	State         string            `json:"state"`
	SchemaVersion int               `json:"schema_version"`
	Source        string            `json:"source,omitempty"`
	AggregateType string            `json:"aggregate_type,omitempty"`
	AggregateID   string            `json:"aggregate_id,omitempty"`
	Sequence      int64             `json:"sequence,omitempty"`
	Destination   string            `json:"destination,omitempty"`
	Attempts      int               `json:"attempts"`
	CreatedAt     time.Time         `json:"created_at"`
	AvailableAt   time.Time         `json:"available_at"`
	PublishedAt   *time.Time        `json:"published_at,omitempty"`
	DeadAt        *time.Time        `json:"dead_at,omitempty"`
	LeaseUntil    *time.Time        `json:"lease_until,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload"`
}

// toRecordJSON is r as --json prints it. The last error and the
// destination are redacted: both may quote a URL with credentials.
func (a *app) toRecordJSON(r postgres.Record) recordJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return recordJSON{
		ID: r.ID.String(), Type: r.Type, State: string(r.State), SchemaVersion: r.SchemaVersion,
		Source: r.Source, AggregateType: r.AggregateType, AggregateID: r.AggregateID, Sequence: r.Sequence,
		Destination: a.redact(r.Destination), Attempts: r.Attempts,
		CreatedAt: r.CreatedAt.UTC(), AvailableAt: r.AvailableAt.UTC(),
		PublishedAt: opt(r.PublishedAt), DeadAt: opt(r.DeadAt), LeaseUntil: opt(r.LeaseUntil),
		LastError: a.redact(r.LastError), Headers: r.Headers, Payload: r.Payload,
	}
}

func aggregateOf(e core.Event) string {
	if e.AggregateType == "" && e.AggregateID == "" {
		return "-"
	}
	return e.AggregateType + "/" + e.AggregateID
}

func truncate(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
