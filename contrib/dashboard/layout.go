package dashboard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// The table's layout as the catalog has it: plain, or range partitions
// of created_at (postgres.MigrateConfig.Partitions, docs/SCHEMA.md "The
// partitioned layout"). The overview shows it, and the events page uses
// the partitions' bounds to prune a creation-time filter.

// partition is one partition of a partitioned outbox table, as
// postgres.Partitions lists it. From is zero for a partition from
// MINVALUE (the legacy one a conversion attached), To for one to
// MAXVALUE, both for the default partition.
type partition = postgres.PartitionInfo

// tableLayout is a table's layout.
type tableLayout struct {
	// Kind is "plain", "daily", "hourly", "N-minute" or, for other
	// widths, "partitioned".
	Kind string `json:"kind"`
	// Partitions counts the partitions, the default one included.
	Partitions int `json:"partitions,omitempty"`
	// Oldest and Newest are the first and the last period covered by a
	// partition (the legacy partition aside: it has no start).
	Oldest *time.Time `json:"oldest_period,omitempty"`
	Newest *time.Time `json:"newest_period,omitempty"`
	// Legacy names the partition holding a converted plain table.
	Legacy string `json:"legacy,omitempty"`
	// Default names the default partition. DefaultRows counts its
	// pending and published rows, DefaultDead its dead letters, each up
	// to defaultProbe; the More fields say there are more.
	Default         string `json:"default_partition,omitempty"`
	DefaultRows     int64  `json:"default_rows"`
	DefaultMore     bool   `json:"default_rows_more,omitempty"`
	DefaultDead     int64  `json:"default_dead"`
	DefaultDeadMore bool   `json:"default_dead_more,omitempty"`

	// Summary is the overview's line, and Warning its warning of rows in
	// the default partition ("" for none); the page's refresh shows them
	// as they are.
	Summary string `json:"summary"`
	Warning string `json:"warning,omitempty"`

	parts []partition
}

// Partitioned is whether the table is partitioned.
func (l *tableLayout) Partitioned() bool { return l != nil && l.Kind != "plain" }

// Label names the layout for the overview.
func (l *tableLayout) Label() string {
	switch l.Kind {
	case "plain":
		return "plain (one table)"
	case "partitioned":
		return "partitioned by created_at"
	}
	return l.Kind + " partitions"
}

// Period formats a period's start: a day, or a time of day for shorter
// periods (UTC).
func (l *tableLayout) Period(t *time.Time) string {
	if t == nil {
		return "–"
	}
	if l.Kind == "daily" {
		return t.UTC().Format("2006-01-02")
	}
	return t.UTC().Format("2006-01-02 15:04")
}

// defaultProbe bounds the count of the default partition's rows: the
// overview says "at least" past it, and reads no more.
const defaultProbe = 1000

// readPartitions returns whether the table is partitioned and, if so, its
// partitions (postgres.Partitions.ListOutbox: two catalog reads).
func readPartitions(ctx context.Context, pool *pgxpool.Pool, n tableNames) (bool, []partition, error) {
	p, err := postgres.NewPartitions(pool, &postgres.PartitionsConfig{Schema: n.schema, Table: n.table})
	if err != nil {
		return false, nil, err
	}
	layout, parts, err := p.ListOutbox(ctx)
	if errors.Is(err, postgres.ErrNotMigrated) {
		return false, nil, fmt.Errorf("table %s does not exist: migrate it (outboxctl migrate)", n.outbox)
	}
	return layout != postgres.PartitionNone, parts, err
}

// readLayout reads the table's layout and probes its default partition.
func readLayout(ctx context.Context, pool *pgxpool.Pool, n tableNames) (*tableLayout, error) {
	partitioned, parts, err := readPartitions(ctx, pool, n)
	if err != nil {
		return nil, err
	}
	if !partitioned {
		l := &tableLayout{Kind: "plain"}
		l.Summary = l.Label()
		return l, nil
	}
	l := &tableLayout{Kind: "partitioned", Partitions: len(parts), parts: parts}
	var newest *partition
	for i := range parts {
		p := &parts[i]
		switch {
		case p.Default:
			l.Default = p.Name
		case p.From.IsZero():
			l.Legacy = p.Name
		default:
			if l.Oldest == nil || p.From.Before(*l.Oldest) {
				l.Oldest = &p.From
			}
			if newest == nil || p.From.After(newest.From) {
				newest = p
			}
		}
	}
	if newest != nil {
		l.Newest = &newest.From
		if !newest.To.IsZero() {
			l.Kind = periodKind(newest.To.Sub(newest.From))
		}
	}
	if l.Default != "" {
		def := pgx.Identifier{n.schema, l.Default}.Sanitize()
		var live, dead int64
		if err := pool.QueryRow(ctx, defaultProbeSQL(def)).Scan(&live, &dead); err != nil {
			return nil, fmt.Errorf("probe the default partition: %w", err)
		}
		l.DefaultRows, l.DefaultMore = min(live, defaultProbe), live > defaultProbe
		l.DefaultDead, l.DefaultDeadMore = min(dead, defaultProbe), dead > defaultProbe
	}
	l.summarise()
	return l, nil
}

// summarise sets Summary and Warning.
func (l *tableLayout) summarise() {
	more := func(b bool) string {
		if b {
			return "+"
		}
		return ""
	}
	s := l.Label() + " · " + num(l.Partitions) + " partition(s)"
	if l.Oldest != nil {
		s += " · periods " + l.Period(l.Oldest) + " to " + l.Period(l.Newest) + " (UTC)"
	}
	if l.Legacy != "" {
		s += " · " + l.Legacy + " holds the rows from before the conversion"
	}
	if l.Default != "" {
		s += " · default partition: " + num(l.DefaultRows) + more(l.DefaultMore) + " event(s)"
		if l.DefaultDead > 0 {
			s += ", " + num(l.DefaultDead) + more(l.DefaultDeadMore) + " dead letter(s)"
		}
	}
	l.Summary = s
	if l.DefaultRows > 0 {
		l.Warning = "Partition maintenance is behind: " + num(l.DefaultRows) + more(l.DefaultMore) +
			" pending or published event(s) sit in the default partition " + l.Default +
			", in periods that have no partition of their own. Run the retention leader (the relay's retention, or postgres.Partitions.Maintain): it creates the missing partitions and moves these rows into them."
	}
}

// defaultProbeSQL counts, up to defaultProbe+1 each, the default
// partition's pending or published rows (rows of a period with no
// partition: the retention leader, which creates partitions ahead, is
// behind) and its dead letters (mostly those Maintain moved out of the
// partitions it dropped, which belong there). Each count walks one
// partial index of the partition and stops at the limit.
func defaultProbeSQL(def string) string {
	lim := strconv.Itoa(defaultProbe + 1)
	return `SELECT (SELECT count(*) FROM (SELECT 1 FROM ` + def + ` WHERE published_at IS NULL AND dead_at IS NULL LIMIT ` + lim + `) p)
	+ (SELECT count(*) FROM (SELECT 1 FROM ` + def + ` WHERE published_at IS NOT NULL LIMIT ` + lim + `) s),
	(SELECT count(*) FROM (SELECT 1 FROM ` + def + ` WHERE dead_at IS NOT NULL LIMIT ` + lim + `) d)`
}

// periodKind names a partition width.
func periodKind(d time.Duration) string {
	switch {
	case d == 24*time.Hour:
		return "daily"
	case d == time.Hour:
		return "hourly"
	case d > 0 && d < time.Hour && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "-minute"
	}
	return "partitioned"
}

// pruneRange is a creation-time filter [since, until) widened to the
// partition bounds around it: from is the greatest bound at or before
// since, to the least at or after until (nil for none, or no such
// bound). As conditions of the walk they prune the partitions wholly
// outside the filter and remove no row from a partition kept, so the
// rows the walk examines (ScanLimit) are as many as without them; only
// the default partition, which holds any creation time, has its rows
// outside them skipped uncounted. Widened, they never exclude a row of
// the filter, whatever partitions were created or dropped since parts
// was read.
func pruneRange(parts []partition, since, until *time.Time) (from, to *time.Time) {
	for _, p := range parts {
		if p.Default {
			continue
		}
		for _, b := range []time.Time{p.From, p.To} {
			if b.IsZero() {
				continue
			}
			if since != nil && !b.After(*since) && (from == nil || b.After(*from)) {
				from = &b
			}
			if until != nil && !b.Before(*until) && (to == nil || b.Before(*to)) {
				to = &b
			}
		}
	}
	return from, to
}
