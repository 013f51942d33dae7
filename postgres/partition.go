package postgres

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// The partitioned layout: what it is and how its partitions are named
// and bounded. Maintenance (creating partitions ahead, dropping retired
// ones) is in partitions.go, the online conversion of a plain table in
// partition_convert.go.
//
// The outbox table is range-partitioned by created_at, the processed table
// by event_id (the timestamp a UUID v7 starts with), both in periods of a
// day or an hour, in UTC. Each has a default partition for rows no period
// covers. An outbox table converted from the plain layout has one more,
// <table>_legacy, the old table itself, covering everything created before
// the conversion's cut-over.

// Partitioning is the layout of an outbox table: one plain table, or range
// partitions of a day or an hour.
type Partitioning int

// Layouts.
const (
	// PartitionNone is the plain layout: one table, published rows
	// deleted in batches (Retention, Prune). The default.
	PartitionNone Partitioning = iota
	// PartitionDaily partitions the outbox and processed tables by day
	// (UTC).
	PartitionDaily
	// PartitionHourly partitions them by hour.
	PartitionHourly
)

// String returns "none", "daily" or "hourly".
func (p Partitioning) String() string {
	switch p {
	case PartitionNone:
		return "none"
	case PartitionDaily:
		return "daily"
	case PartitionHourly:
		return "hourly"
	}
	return fmt.Sprintf("Partitioning(%d)", int(p))
}

// ParsePartitioning reads "none" (or ""), "daily" or "hourly".
func ParsePartitioning(s string) (Partitioning, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none", "off", "plain":
		return PartitionNone, nil
	case "daily", "day":
		return PartitionDaily, nil
	case "hourly", "hour":
		return PartitionHourly, nil
	}
	return 0, &core.ConfigError{Field: "Partitions", Reason: fmt.Sprintf("%q is not a layout: use none, daily or hourly", s)}
}

func (p Partitioning) valid() bool { return p >= PartitionNone && p <= PartitionHourly }

// period is the width of one partition.
func (p Partitioning) period() time.Duration {
	if p == PartitionHourly {
		return time.Hour
	}
	return 24 * time.Hour
}

// unit is the period as date_trunc and interval name it.
func (p Partitioning) unit() string {
	if p == PartitionHourly {
		return "hour"
	}
	return "day"
}

// stamp is the to_char pattern of a partition's name suffix, and
// goStamp the same in Go.
func (p Partitioning) stamp() string {
	if p == PartitionHourly {
		return "YYYYMMDDHH24"
	}
	return "YYYYMMDD"
}

func (p Partitioning) goStamp() string {
	if p == PartitionHourly {
		return "2006010215"
	}
	return "20060102"
}

// start is the beginning of the period holding t.
func (p Partitioning) start(t time.Time) time.Time {
	return t.UTC().Truncate(p.period())
}

// DefaultPartitionsAhead is how many periods after the current one have
// their partitions created ahead of time, by default: the migration
// creates them, and the retention leader keeps them there. Should no
// leader run for longer, rows land in the default partition and are moved
// into their period's partition when it is created.
func DefaultPartitionsAhead(p Partitioning) int {
	if p == PartitionHourly {
		return 4
	}
	return 2
}

// PartitionName is the name of the partition of table (an outbox table's
// name, or "<table>_processed") that holds time t: the creation time of an
// outbox event, the time a processed record's event ID starts with.
func (p Partitioning) PartitionName(table string, t time.Time) string {
	return p.partName(table, p.start(t))
}

// partName is the name of the partition starting at lo of table (the
// outbox table's name, or "<table>_processed").
func (p Partitioning) partName(table string, lo time.Time) string {
	return table + "_p" + lo.UTC().Format(p.goStamp())
}

// defaultPartName and legacyPartName name the default partition and the
// plain table a conversion attached.
func defaultPartName(table string) string { return table + "_default" }
func legacyPartName(table string) string  { return table + "_legacy" }

// uuidAt is the smallest UUID v7 of millisecond t: the bound of a
// processed-table partition.
func uuidAt(t time.Time) pgtype.UUID {
	var b [16]byte
	ms := uint64(max(t.UnixMilli(), 0))
	var m [8]byte
	binary.BigEndian.PutUint64(m[:], ms)
	copy(b[:6], m[2:])
	return pgtype.UUID{Bytes: b, Valid: true}
}

// uuidTime is the millisecond timestamp a UUID starts with: the time of a
// UUID v7, and for any other UUID what its first six bytes read as.
func uuidTime(u [16]byte) time.Time {
	var m [8]byte
	copy(m[2:], u[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(m[:]))).UTC()
}

// partNames are the qualified names the partitioned layout adds for one
// outbox table.
type partNames struct {
	outboxDefault, processedDefault string // "schema"."table_default", ...
	headersCheck                    string // unqualified
}

func newPartNames(n names) partNames {
	return partNames{
		outboxDefault:    pgx.Identifier{n.schema, defaultPartName(n.table)}.Sanitize(),
		processedDefault: pgx.Identifier{n.schema, defaultPartName(n.table + "_processed")}.Sanitize(),
		headersCheck:     pgx.Identifier{n.table + "_headers_check"}.Sanitize(),
	}
}
