package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

const migrateHelp = `Applies the outbox migrations for --schema and --table (creating the schema
if missing), under an advisory lock: safe to run from every replica at once.

  outboxctl migrate                  apply every pending migration
  outboxctl migrate --print          print the SQL "migrate" runs, for your own migration tool
  outboxctl migrate --print --down   print the SQL that reverts every migration
  outboxctl migrate --partitions daily
                                     the partitioned layout (docs/SCHEMA.md), by day, hour
                                     (hourly) or minutes (15m): new tables are created
                                     partitioned; a plain outbox table is converted online,
                                     its rows kept, while writers and relays run
  outboxctl migrate --print --partitions daily
                                     print the partitioned layout's SQL (with --down, its revert)
  outboxctl migrate status [--json]  list migrations and whether each is applied
  outboxctl migrate down --to N --yes
                                     revert migrations newer than version N (0 drops every
                                     outbox table, with its data)

The printed script records the versions it applies, so "migrate" and
"migrate status" see a hand-applied script as applied.`

func (a *app) cmdMigrate(ctx context.Context, args []string) error {
	fs := a.newFlagSet("migrate", "[--partitions LAYOUT] [--print [--down]] | status | down --to N --yes", migrateHelp)
	a.registerGlobals(fs)
	printSQL := fs.Bool("print", false, "print the migration SQL instead of applying it (no database needed)")
	down := fs.Bool("down", false, "with --print: print the script that reverts every migration")
	partitions := registerPartitionsFlag(fs)
	rest, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		if flagGiven(fs, "partitions") && rest[0] != "up" && rest[0] != "apply" {
			return usageError(fmt.Sprintf("--partitions chooses the layout migrate creates or converts to; migrate %s ignores it: drop the flag", rest[0]))
		}
		switch rest[0] {
		case "up", "apply":
			if flagGiven(fs, "partitions") {
				if err := noArgs(fs, rest[1:]); err != nil {
					return err
				}
				return a.migratePartitioned(ctx, *partitions)
			}
			return a.migrateUp(ctx, fs, rest[1:])
		case "status":
			return a.migrateStatus(ctx, rest[1:])
		case "down":
			return a.migrateDown(ctx, rest[1:])
		}
		return usageError(fmt.Sprintf("unknown migrate subcommand %q: use status or down (or no subcommand to apply)", rest[0]))
	}
	if *printSQL {
		m, layout, err := a.partitionedMigrator(nil, *partitions)
		if err != nil {
			return err
		}
		if flagGiven(fs, "partitions") && layout == postgres.PartitionNone {
			return usageError(fmt.Sprintf("--partitions %q asks for the plain layout: print without --partitions", *partitions))
		}
		dir := postgres.DirectionUp
		if *down {
			dir = postgres.DirectionDown
		}
		_, err = fmt.Fprint(a.stdout, m.SQL(dir))
		return err
	}
	if *down {
		return usageError("--down only goes with --print; to revert, use `outboxctl migrate down --to N --yes`")
	}
	if flagGiven(fs, "partitions") {
		return a.migratePartitioned(ctx, *partitions)
	}
	return a.migrateUp(ctx, fs, nil)
}

func (a *app) migrateUp(ctx context.Context, fs *flagSet, args []string) error {
	if err := noArgs(fs, args); err != nil {
		return err
	}
	pool, m, err := a.openMigrator(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := m.Up(ctx)
	if err != nil {
		return a.dbError(err)
	}
	if len(applied) == 0 {
		fmt.Fprintf(a.stdout, "schema %s, table %s: already up to date\n", a.g.schema, a.g.table)
		return nil
	}
	fmt.Fprintf(a.stdout, "schema %s, table %s: applied %s\n", a.g.schema, a.g.table, versionNames(m, applied))
	return nil
}

func versionNames(m *postgres.Migrator, versions []int) string {
	names := map[int]string{}
	for _, mg := range m.Migrations() {
		names[mg.Version] = mg.Name
	}
	out := make([]string, len(versions))
	for i, v := range versions {
		out[i] = fmt.Sprintf("%03d_%s", v, names[v])
	}
	return strings.Join(out, ", ")
}

func (a *app) migrateStatus(ctx context.Context, args []string) error {
	fs := a.newFlagSet("migrate status", "[--json]", "Lists every known migration and whether it is applied. It writes nothing.")
	a.registerGlobals(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	pool, m, err := a.openMigrator(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := m.Status(ctx)
	if err != nil {
		return a.dbError(err)
	}
	if *asJSON {
		type row struct {
			Version   int        `json:"version"`
			Name      string     `json:"name"`
			Applied   bool       `json:"applied"`
			AppliedAt *time.Time `json:"applied_at,omitempty"`
		}
		rows := make([]row, len(st))
		for i, s := range st {
			rows[i] = row{Version: s.Version, Name: s.Name, Applied: s.Applied}
			if s.Applied {
				at := s.AppliedAt.UTC()
				rows[i].AppliedAt = &at
			}
		}
		return writeJSON(a.stdout, map[string]any{"schema": a.g.schema, "table": a.g.table, "migrations": rows})
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED AT")
	for _, s := range st {
		at := "pending"
		if s.Applied {
			at = s.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%03d\t%s\t%s\n", s.Version, s.Name, at)
	}
	return tw.Flush()
}

func (a *app) migrateDown(ctx context.Context, args []string) error {
	fs := a.newFlagSet("migrate down", "--to N --yes",
		"Reverts applied migrations newer than version N, newest first, in one transaction.\n"+
			"Reverting drops tables and columns with their data: --yes is required. --to 0\n"+
			"removes every outbox table; the schema itself is kept.")
	a.registerGlobals(fs)
	to := fs.Int("to", -1, "target `version`: migrations newer than it are reverted (required)")
	yes := fs.Bool("yes", false, "confirm: reverting deletes data")
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if *to < 0 {
		return usageError("migrate down needs --to N (the version to go back to; 0 removes every outbox table)")
	}
	if !*yes {
		return usageError(fmt.Sprintf("migrate down --to %d drops outbox tables or columns with their data in schema %s: add --yes to confirm", *to, a.g.schema))
	}
	pool, m, err := a.openMigrator(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	reverted, err := m.Down(ctx, *to)
	if err != nil {
		return a.dbError(err)
	}
	if len(reverted) == 0 {
		fmt.Fprintf(a.stdout, "schema %s, table %s: nothing to revert above version %d\n", a.g.schema, a.g.table, *to)
		return nil
	}
	fmt.Fprintf(a.stdout, "schema %s, table %s: reverted %s\n", a.g.schema, a.g.table, versionNames(m, reverted))
	return nil
}

// writeJSON writes v indented, with a trailing newline.
func writeJSON(w interface{ Write([]byte) (int, error) }, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
