package postgres

import (
	"encoding/binary"
	"fmt"
	"strconv"
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
// The outbox table is range-partitioned by created_at, in periods of a
// day, an hour or a number of minutes that divides an hour, in UTC; the
// processed table by event_id (the timestamp a UUID v7 starts with), in
// days whatever the outbox table's period (processedLayout). Each has a
// default partition for rows no period covers. An outbox table
// converted from the plain layout has one more, <table>_legacy, the old
// table itself, covering everything created before the conversion's
// cut-over.

// Partitioning is the layout of an outbox table: one plain table, or range
// partitions of a day, an hour or some minutes (PartitionMinutes).
type Partitioning int

// Layouts.
const (
	// PartitionNone is the plain layout: one table, published rows
	// deleted in batches (Retention, Prune). The default.
	PartitionNone Partitioning = iota
	// PartitionDaily partitions the outbox and processed tables by day
	// (UTC).
	PartitionDaily
	// PartitionHourly partitions the outbox table by hour, the processed
	// table by day.
	PartitionHourly
)

// Periods of minutes are encoded as minutesBase + m, so that the named
// layouts keep their values and any m, valid or not, can be told apart
// from them (and printed) by valid() and String().
const (
	minutesBase = 1 << 20
	minutesSpan = 1 << 19 // m is kept within (-minutesSpan, minutesSpan)
)

// PartitionMinutes partitions the outbox table in periods of m minutes
// (UTC), and the processed table by day, m one of 1, 2, 3, 4, 5, 6, 10,
// 12, 15, 20 or 30: the whole minutes that divide an hour, so that every
// hour (and day) starts a period. It is for short retentions: a published event is kept until its
// partition is dropped, between the retention and the retention plus one
// period, so at 10 minutes' retention hourly partitions hold up to 70
// minutes of events and 5-minute ones up to 15. Any other m makes a layout
// that is not valid: NewMigrator, ConvertToPartitioned and the like refuse
// it with a *core.ConfigError.
func PartitionMinutes(m int) Partitioning {
	return Partitioning(minutesBase + min(max(m, -minutesSpan+1), minutesSpan-1))
}

// minutes returns m of a PartitionMinutes(m) layout, valid or not, and
// whether p is one.
func (p Partitioning) minutes() (int, bool) {
	if p > minutesBase-minutesSpan && p < minutesBase+minutesSpan {
		return int(p) - minutesBase, true
	}
	return 0, false
}

// partitionMinuteChoices are the valid m of PartitionMinutes, as error
// messages list them.
const partitionMinuteChoices = "1, 2, 3, 4, 5, 6, 10, 12, 15, 20 or 30"

// String returns "none", "daily", "hourly" or, for PartitionMinutes(m),
// "<m>m" ("5m"), which ParsePartitioning reads back.
func (p Partitioning) String() string {
	switch p {
	case PartitionNone:
		return "none"
	case PartitionDaily:
		return "daily"
	case PartitionHourly:
		return "hourly"
	}
	if m, ok := p.minutes(); ok {
		return strconv.Itoa(m) + "m"
	}
	return fmt.Sprintf("Partitioning(%d)", int(p))
}

// ParsePartitioning reads "none" (or ""), "daily", "hourly", or a number
// of minutes that divides an hour: "5m", "5min", "5 minutes".
func ParsePartitioning(s string) (Partitioning, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch v {
	case "", "none", "off", "plain":
		return PartitionNone, nil
	case "daily", "day":
		return PartitionDaily, nil
	case "hourly", "hour":
		return PartitionHourly, nil
	}
	rest := strings.TrimLeft(v, "0123456789")
	if unit := strings.TrimSpace(rest); len(rest) < len(v) {
		switch unit {
		case "m", "min", "mins", "minute", "minutes":
			m, err := strconv.Atoi(v[:len(v)-len(rest)])
			if p := PartitionMinutes(m); err == nil && p.valid() {
				return p, nil
			}
			return 0, &core.ConfigError{Field: "Partitions", Reason: fmt.Sprintf("%q is not a period of partitions: use a number of minutes that divides an hour, %s (for 60, hourly)", s, partitionMinuteChoices)}
		}
	}
	return 0, &core.ConfigError{Field: "Partitions", Reason: fmt.Sprintf("%q is not a layout: use none, daily, hourly or minutes that divide an hour (5m, 5min; %s)", s, partitionMinuteChoices)}
}

// partitionedChoices are the partitioned layouts, as configuration errors
// offer them.
const partitionedChoices = "PartitionDaily, PartitionHourly or PartitionMinutes(m) with m " + partitionMinuteChoices

func (p Partitioning) valid() bool {
	if m, ok := p.minutes(); ok {
		return m >= 1 && m < 60 && 60%m == 0
	}
	return p >= PartitionNone && p <= PartitionHourly
}

// period is the width of one partition.
func (p Partitioning) period() time.Duration {
	if m, ok := p.minutes(); ok && p.valid() {
		return time.Duration(m) * time.Minute
	}
	if p == PartitionHourly {
		return time.Hour
	}
	return 24 * time.Hour
}

// interval is the period as a PostgreSQL interval literal's text ("1
// day", "5 minutes"), for the migrations' comments; they compute bounds
// from the period's seconds, which no session TimeZone can stretch.
func (p Partitioning) interval() string {
	switch d := p.period(); {
	case d == 24*time.Hour:
		return "1 day"
	case d == time.Hour:
		return "1 hour"
	case d == time.Minute:
		return "1 minute"
	default:
		return strconv.Itoa(int(d/time.Minute)) + " minutes"
	}
}

// stamp is the to_char pattern of a partition's name suffix, and
// goStamp the same in Go.
func (p Partitioning) stamp() string {
	switch p.period() {
	case 24 * time.Hour:
		return "YYYYMMDD"
	case time.Hour:
		return "YYYYMMDDHH24"
	}
	return "YYYYMMDDHH24MI"
}

func (p Partitioning) goStamp() string {
	switch p.period() {
	case 24 * time.Hour:
		return "20060102"
	case time.Hour:
		return "2006010215"
	}
	return "200601021504"
}

// start is the beginning of the period holding t. Truncate counts from
// the zero time, a midnight UTC, and every period divides a day, so
// periods start on the hour (minutes) or at midnight (days), in UTC.
func (p Partitioning) start(t time.Time) time.Time {
	return t.UTC().Truncate(p.period())
}

// DefaultPartitionsAhead is how many periods after the current one have
// their partitions created ahead of time, by default: the migration
// creates them, and the retention leader keeps them there. Should no
// leader run for longer, rows land in the default partition and are moved
// into their period's partition when it is created. Daily: 2; hourly: 4;
// periods of m minutes: enough to cover 30 minutes (ceil(30/m)), and at
// least 4. The leader runs a pass a minute (DefaultRetentionInterval),
// so a few periods would do while it runs; the half hour is the time a
// leader may be missing (a deployment, a failover, passes failing on a
// lock) before rows start to go to the default partition, where they are
// pruned row by row and moved when their period's partition is created.
// The processed table, partitioned by day on every partitioned layout,
// has DefaultPartitionsAhead(PartitionDaily) days ahead.
func DefaultPartitionsAhead(p Partitioning) int {
	if m, ok := p.minutes(); ok && p.valid() {
		return max((30+m-1)/m, 4)
	}
	if p == PartitionHourly {
		return 4
	}
	return 2
}

// processedLayout is the layout the migrations give the processed table
// when the outbox table's is p: daily whenever p is partitioned. Its
// records are kept for RetainProcessed (30 days by default), so periods
// as short as the outbox table's would keep hundreds or thousands of
// partitions (720 hourly, 8,640 of 5 minutes) for every consumer's insert
// to plan and lock; a day's partition is dropped at most a day late,
// which is nothing next to a retention of days. A table created before
// keeps its own period: maintenance reads each table's from its
// partitions.
func (p Partitioning) processedLayout() Partitioning {
	if p == PartitionNone {
		return PartitionNone
	}
	return PartitionDaily
}

// aheadOf is how many periods of a table partitioned in t to keep created
// after the current one, when ahead (0: the default) counts periods of the
// outbox table's layout outbox, as MigrateConfig.PartitionsAhead and
// PartitionsConfig.Ahead do: as many as cover that time, and at least
// t's default. A table of the outbox table's period (or beside a plain
// outbox table) takes ahead as it is.
func aheadOf(t, outbox Partitioning, ahead int) int {
	if ahead <= 0 {
		return DefaultPartitionsAhead(t)
	}
	if outbox == PartitionNone || t.period() == outbox.period() {
		return ahead
	}
	// In minutes, every period's unit, so that no ahead overflows a
	// Duration.
	span, per := ahead*int(outbox.period()/time.Minute), int(t.period()/time.Minute)
	return max(DefaultPartitionsAhead(t), (span+per-1)/per)
}

// PartitionName is the name of the partition of table (an outbox table's
// name, or "<table>_processed") that holds time t: the creation time of an
// outbox event, the time a processed record's event ID starts with. The
// name is table + "_p" + the period's start in UTC: YYYYMMDD daily,
// YYYYMMDDHH hourly, YYYYMMDDHHMI for periods of minutes
// ("outbox_events_p203001011205" for 12:05 to 12:10 in 5-minute periods).
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
