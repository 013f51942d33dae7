package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// outboxctl migrate --partitions LAYOUT: the partitioned layout
// (docs/SCHEMA.md, "The partitioned layout"). On a schema without the
// outbox tables, the migrations create them partitioned; on a plain
// outbox table, migrate converts it online (postgres.ConvertToPartitioned)
// after applying what is pending; on a partitioned one it applies what is
// pending. The processed table beside it is converted too (by day),
// unless it holds event IDs that are not UUID v7, which a warning then
// names. With --print, the printed script creates the partitioned layout.

// partitionsLayouts are the partitioned layouts ParsePartitioning reads,
// as --partitions' help and errors name them.
const partitionsLayouts = "daily, hourly or a period of minutes such as 15m"

// partitionsFlagHelp is --partitions' text in migrate --help.
const partitionsFlagHelp = "partitioned `layout`: " + partitionsLayouts + " (minutes that divide an hour); without it, one plain table. New tables are created partitioned, an existing plain outbox table is converted online while writers and relays run; with --print, the partitioned layout's SQL"

// registerPartitionsFlag adds --partitions to migrate's flag set.
func registerPartitionsFlag(fs *flagSet) *string {
	return fs.String("partitions", "", partitionsFlagHelp)
}

// partitionedMigrator is a migrator whose new tables have the layout
// --partitions names (pool nil to print only).
func (a *app) partitionedMigrator(pool *pgxpool.Pool, partitions string) (*postgres.Migrator, postgres.Partitioning, error) {
	layout, err := postgres.ParsePartitioning(partitions)
	var ce *core.ConfigError
	if errors.As(err, &ce) {
		return nil, 0, usageError("--partitions: " + ce.Reason)
	}
	if err != nil {
		return nil, 0, usageError("--partitions: " + strings.TrimPrefix(err.Error(), "outboxkit: "))
	}
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: a.g.schema, Table: a.g.table, Partitions: layout})
	if err != nil {
		return nil, 0, a.dbError(err)
	}
	return m, layout, nil
}

// migratePartitioned is "migrate --partitions": the migrations, and the
// conversion of a plain outbox table.
func (a *app) migratePartitioned(ctx context.Context, partitions string) error {
	// The flag is checked before connecting: a usage error needs no
	// database.
	if _, layout, err := a.partitionedMigrator(nil, partitions); err != nil {
		return err
	} else if layout == postgres.PartitionNone {
		return usageError(fmt.Sprintf("--partitions %q asks for the plain layout: run migrate without --partitions (a partitioned table is not converted back)", partitions))
	}
	pool, err := a.connect(ctx, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, layout, err := a.partitionedMigrator(pool, partitions)
	if err != nil {
		return err
	}
	// A partitioned table keeps its period: say so rather than let
	// "already up to date" read as if it had the one asked for.
	if have, err := a.tableLayout(ctx, pool); err == nil && have != postgres.PartitionNone && have != layout {
		a.warn("schema %s, table %s is partitioned %s already: --partitions %s applies to tables migrate creates, and the existing ones keep their period",
			a.g.schema, a.g.table, have, layout)
	}
	applied, err := m.Up(ctx)
	var le *postgres.LayoutError
	if errors.As(err, &le) {
		// A plain table: bring it up to date as it is, then convert it.
		plain, perr := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: a.g.schema, Table: a.g.table})
		if perr != nil {
			return a.dbError(perr)
		}
		if applied, err = plain.Up(ctx); err != nil {
			return a.dbError(err)
		}
		if len(applied) > 0 {
			fmt.Fprintf(a.stdout, "schema %s, table %s: applied %s\n", a.g.schema, a.g.table, versionNames(plain, applied))
		}
		fmt.Fprintf(a.stdout, "schema %s, table %s: converting the plain outbox table to %s partitions while writers and relays run (a check is validated by a scan first)\n",
			a.g.schema, a.g.table, layout)
		rep, err := postgres.ConvertToPartitioned(ctx, pool, &postgres.MigrateConfig{Schema: a.g.schema, Table: a.g.table, Partitions: layout})
		if err != nil {
			return a.dbError(err)
		}
		fmt.Fprintf(a.stdout, "schema %s, table %s: converted: rows created before %s stay in %s, later ones go to their %s's partition; the swap held the table for %s\n",
			a.g.schema, a.g.table, rep.CutOver.UTC().Format(time.RFC3339), rep.Legacy, layoutUnit(layout), rep.Took.Round(time.Millisecond))
		a.reportProcessedConversion(rep)
		return nil
	}
	if err != nil {
		return a.dbError(err)
	}
	if len(applied) == 0 {
		fmt.Fprintf(a.stdout, "schema %s, table %s: already up to date\n", a.g.schema, a.g.table)
	} else {
		fmt.Fprintf(a.stdout, "schema %s, table %s: applied %s (%s partitions for new tables)\n", a.g.schema, a.g.table, versionNames(m, applied), layout)
	}
	// A partitioned outbox table beside a plain processed table (converted
	// by a version that left that one plain): convert it now. Nothing to
	// do (two catalog reads) when both are partitioned.
	rep, err := postgres.ConvertToPartitioned(ctx, pool, &postgres.MigrateConfig{Schema: a.g.schema, Table: a.g.table, Partitions: layout})
	if err != nil {
		return a.dbError(err)
	}
	a.reportProcessedConversion(rep)
	return nil
}

// reportProcessedConversion prints what a conversion did to the
// processed table, and its warnings.
func (a *app) reportProcessedConversion(rep postgres.ConversionReport) {
	if p := rep.Processed; p != nil {
		fmt.Fprintf(a.stdout, "schema %s, table %s_processed: converted: records of events created before %s stay in %s, later ones go to their day's partition; the swap held the table for %s\n",
			a.g.schema, a.g.table, p.CutOver.UTC().Format(time.RFC3339), p.Legacy, p.Took.Round(time.Millisecond))
		for _, w := range p.Warnings {
			a.warn("%s", w)
		}
	}
	for _, w := range rep.Warnings {
		a.warn("%s", w)
	}
}

// tableLayout is the outbox table's layout (an error when it does not
// exist).
func (a *app) tableLayout(ctx context.Context, pool *pgxpool.Pool) (postgres.Partitioning, error) {
	p, err := a.partitions(pool)
	if err != nil {
		return 0, err
	}
	return p.Layout(ctx)
}

// layoutUnit names one period of layout p in the conversion's report.
func layoutUnit(p postgres.Partitioning) string {
	switch p {
	case postgres.PartitionHourly:
		return "hour"
	case postgres.PartitionDaily:
		return "day"
	}
	return p.String() + " period"
}
