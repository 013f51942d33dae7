package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Diagnosing: why is the outbox slow or stuck?
//
// Doctor reads the catalogs and statistics views and asks the planner; it
// changes nothing. Each check returns findings that say what is wrong,
// with the numbers and the objects (a PID, a slot, an index), and what to
// do about it. A check that cannot run (a view the role may not read) is
// listed in DoctorReport.Skipped with the reason, and the others go on.

// Severity ranks a Finding.
type Severity int

// Severities, mildest first.
const (
	// SeverityInfo is worth knowing and needs no action now.
	SeverityInfo Severity = iota + 1
	// SeverityWarning makes the outbox slower, or will stop it if left
	// alone: act on it soon.
	SeverityWarning
	// SeverityCritical stops or breaks the outbox now.
	SeverityCritical
)

func (s Severity) String() string {
	switch s {
	case SeverityInfo:
		return "info"
	case SeverityWarning:
		return "warning"
	case SeverityCritical:
		return "critical"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// MarshalText writes the severity's name.
func (s Severity) MarshalText() ([]byte, error) {
	if s < SeverityInfo || s > SeverityCritical {
		return nil, fmt.Errorf("outboxkit/postgres: unknown severity %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads "info", "warning" or "critical".
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSeverity reads "info", "warning" or "critical" (any case).
func ParseSeverity(name string) (Severity, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "info":
		return SeverityInfo, nil
	case "warning", "warn":
		return SeverityWarning, nil
	case "critical", "crit":
		return SeverityCritical, nil
	}
	return 0, fmt.Errorf("outboxkit/postgres: severity %q: use info, warning or critical", name)
}

// The checks Doctor runs, by name (DoctorConfig.Checks, Finding.Check).
const (
	// CheckMigrations: the outbox table exists and its migrations are
	// applied (relays refuse to start otherwise).
	CheckMigrations = "migrations"
	// CheckIndexes: the indexes the claim, settlements, retention,
	// dead-letter listing and the configured features (ordering,
	// destination filters) need exist and are valid.
	CheckIndexes = "indexes"
	// CheckXminHorizon: transactions, prepared transactions, replication
	// slots and standbys holding back the xmin horizon, below which
	// VACUUM may not remove the row versions settled events leave.
	CheckXminHorizon = "xmin-horizon"
	// CheckIdleInTransaction: sessions idle inside an open transaction.
	CheckIdleInTransaction = "idle-in-transaction"
	// CheckReplicationSlots: inactive slots, and slots retaining WAL.
	CheckReplicationSlots = "replication-slots"
	// CheckAutovacuum: autovacuum off for the server or the table, or not
	// reaching the table.
	CheckAutovacuum = "autovacuum"
	// CheckTableBloat: dead row versions VACUUM has not removed.
	CheckTableBloat = "table-bloat"
	// CheckPendingIndex: dead entries at the head of the pending index,
	// which every search for the claim floor steps over.
	CheckPendingIndex = "pending-index"
	// CheckGenericPlan: a generic plan of the relays' claim that scans
	// the whole table.
	CheckGenericPlan = "generic-plan"
	// CheckStatistics: planner statistics missing or far behind the
	// table's size.
	CheckStatistics = "statistics"
	// CheckClockSkew: this host's clock against the database's.
	CheckClockSkew = "clock-skew"
)

// AllChecks returns every check's name, in the order Doctor runs them.
func AllChecks() []string {
	return []string{
		CheckMigrations, CheckIndexes, CheckXminHorizon, CheckIdleInTransaction, CheckReplicationSlots,
		CheckAutovacuum, CheckTableBloat, CheckPendingIndex, CheckGenericPlan, CheckStatistics, CheckClockSkew,
	}
}

// CheapChecks returns the checks that read only catalogs and statistics
// views (no EXPLAIN, no index scan, no count): for a readiness probe or a
// dashboard refreshed every few seconds. The pending-index and
// generic-plan checks are left out.
func CheapChecks() []string {
	return []string{
		CheckMigrations, CheckIndexes, CheckXminHorizon, CheckIdleInTransaction, CheckReplicationSlots,
		CheckAutovacuum, CheckTableBloat, CheckStatistics, CheckClockSkew,
	}
}

// Doctor defaults.
const (
	DefaultLongTransaction   = 5 * time.Minute
	DefaultIdleInTransaction = time.Minute
	DefaultSlotRetainedWAL   = 1 << 30 // 1 GiB
	DefaultSlotXminAge       = 1_000_000
	DefaultMaxClockSkew      = time.Second
)

// DoctorConfig configures Doctor. The zero value is usable: every field
// says its default.
type DoctorConfig struct {
	// Schema and Table name the outbox. Default to "public" and
	// "outbox_events".
	Schema, Table string

	// Ordering says the relays run with per-aggregate ordering
	// (Config.Ordering), which needs the aggregate index. Defaults to
	// false.
	Ordering bool

	// Destinations says relays claim by destination
	// (core.ClaimRequest.Destination, outboxctl relay --only-destination):
	// such claims want an index led by the destination column, which the
	// migrations do not create. Defaults to false.
	Destinations bool

	// Checks selects the checks to run, by name (AllChecks(),
	// CheapChecks()). Defaults to AllChecks().
	Checks []string

	// LongTransaction is the age from which a transaction holding back
	// the xmin horizon is reported (critical from six times as long).
	// Defaults to DefaultLongTransaction (5 minutes).
	LongTransaction time.Duration

	// IdleInTransaction is how long a session may sit idle inside a
	// transaction before it is reported. Defaults to
	// DefaultIdleInTransaction (1 minute).
	IdleInTransaction time.Duration

	// SlotRetainedWAL is how many bytes of WAL a replication slot may
	// retain before it is reported. Defaults to DefaultSlotRetainedWAL
	// (1 GiB).
	SlotRetainedWAL int64

	// SlotXminAge is the age, in transactions, from which an active slot's
	// or a standby's xmin is reported as holding back the horizon
	// (inactive slots are reported whatever their age). Defaults to
	// DefaultSlotXminAge (1,000,000).
	SlotXminAge int64

	// MaxClockSkew is how far this host's clock may be from the
	// database's. Defaults to DefaultMaxClockSkew (1 second).
	MaxClockSkew time.Duration

	// Now is this host's clock, compared with the database's by the
	// clock-skew check. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c DoctorConfig) WithDefaults() DoctorConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if len(c.Checks) == 0 {
		c.Checks = AllChecks()
	}
	if c.LongTransaction <= 0 {
		c.LongTransaction = DefaultLongTransaction
	}
	if c.IdleInTransaction <= 0 {
		c.IdleInTransaction = DefaultIdleInTransaction
	}
	if c.SlotRetainedWAL <= 0 {
		c.SlotRetainedWAL = DefaultSlotRetainedWAL
	}
	if c.SlotXminAge <= 0 {
		c.SlotXminAge = DefaultSlotXminAge
	}
	if c.MaxClockSkew <= 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Finding is one problem Doctor found.
type Finding struct {
	// Check is the check that found it (CheckXminHorizon, ...).
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	// Object is what the finding is about, as an operator would name it:
	// "pid 4242", "slot billing_sub", "index public.outbox_events_pending_idx",
	// "table public.outbox_events", "server".
	Object string `json:"object"`
	// Summary says what is wrong, with the numbers, in one line.
	Summary string `json:"summary"`
	// Fix says what to do, in one or two sentences, with the statement to
	// run where there is one.
	Fix string `json:"fix"`

	// The facts behind the finding, where they apply (zero otherwise),
	// for dashboards and scripts.
	PID   int           `json:"pid,omitempty"`
	Age   time.Duration `json:"-"`
	Bytes int64         `json:"bytes,omitempty"`
	Count int64         `json:"count,omitempty"`
}

// SkippedCheck is a check that could not run.
type SkippedCheck struct {
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

// DoctorReport is what Doctor found, worst first.
type DoctorReport struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
	// CheckedAt is when the checks started, by the database's clock.
	CheckedAt time.Time      `json:"checked_at"`
	Findings  []Finding      `json:"findings"`
	Skipped   []SkippedCheck `json:"skipped"`
}

// Worst returns the highest severity among the findings, 0 when there is
// none.
func (r *DoctorReport) Worst() Severity {
	var w Severity
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w
}

// AtLeast returns the findings of severity min or worse.
func (r *DoctorReport) AtLeast(min Severity) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity >= min {
			out = append(out, f)
		}
	}
	return out
}

// Doctor runs the checks cfg selects (nil for every check with the
// defaults) against the outbox on db, a *pgxpool.Pool or a *sql.DB, and
// returns what it found. It changes nothing: it reads catalogs and
// statistics views, and asks the planner for the generic plan of the
// relays' claim (in a transaction it rolls back). It returns an error
// only when the database does not answer or cfg is invalid; a check that
// cannot run is in the report's Skipped.
//
// Some checks look at the whole database or server (sessions, slots,
// autovacuum settings): what they report may belong to other applications
// sharing it, which is the point, since those hold back the outbox's
// vacuum too. To see other roles' sessions, the role needs pg_monitor (or
// pg_read_all_stats); without it their transactions go unreported.
func Doctor[DB Handle](ctx context.Context, db DB, cfg *DoctorConfig) (*DoctorReport, error) {
	h, _, err := openHandle(db, "db")
	if err != nil {
		return nil, err
	}
	var c DoctorConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	n, err := newNames(c.Schema, c.Table)
	if err != nil {
		return nil, err
	}
	all := AllChecks()
	for _, name := range c.Checks {
		if !slices.Contains(all, name) {
			return nil, fmt.Errorf("outboxkit/postgres: doctor: unknown check %q: use one of %s", name, strings.Join(all, ", "))
		}
	}
	d := &doctor{db: h, cfg: c, n: n}
	rep := &DoctorReport{Schema: n.schema, Table: n.table, Findings: []Finding{}, Skipped: []SkippedCheck{}}
	if err := h.QueryRow(ctx, "SELECT now()").Scan(&rep.CheckedAt); err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: doctor: the database did not answer (%w): check the connection settings and that PostgreSQL is up", interpretError(err))
	}
	for _, name := range all {
		if !slices.Contains(c.Checks, name) {
			continue
		}
		found, err := d.run(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rep.Skipped = append(rep.Skipped, SkippedCheck{Check: name, Reason: oneLineReason(err)})
			continue
		}
		for i := range found {
			found[i].Check = name
		}
		rep.Findings = append(rep.Findings, found...)
	}
	// Worst first; within a severity, in the order of the checks.
	slices.SortStableFunc(rep.Findings, func(a, b Finding) int { return int(b.Severity) - int(a.Severity) })
	return rep, nil
}

// oneLineReason is err's text without line breaks.
func oneLineReason(err error) string {
	var se *skipError
	if errors.As(err, &se) {
		return se.reason
	}
	return strings.Join(strings.Fields(interpretError(err).Error()), " ")
}

// skipError is a check that chose not to run, with why.
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

// doctor is one Doctor run.
type doctor struct {
	db  conns
	cfg DoctorConfig
	n   names

	// table caches the outbox table's facts for the checks that share
	// them.
	table *tableFacts
}

// run runs the check called name.
func (d *doctor) run(ctx context.Context, name string) ([]Finding, error) {
	switch name {
	case CheckMigrations:
		return d.checkMigrations(ctx)
	case CheckIndexes:
		return d.checkIndexes(ctx)
	case CheckXminHorizon:
		return d.checkXminHorizon(ctx)
	case CheckIdleInTransaction:
		return d.checkIdleInTransaction(ctx)
	case CheckReplicationSlots:
		return d.checkReplicationSlots(ctx)
	case CheckAutovacuum:
		return d.checkAutovacuum(ctx)
	case CheckTableBloat:
		return d.checkTableBloat(ctx)
	case CheckPendingIndex:
		return d.checkPendingIndex(ctx)
	case CheckGenericPlan:
		return d.checkGenericPlan(ctx)
	case CheckStatistics:
		return d.checkStatistics(ctx)
	case CheckClockSkew:
		return d.checkClockSkew(ctx)
	}
	return nil, fmt.Errorf("unknown check %q", name)
}

// MarshalJSON adds age_seconds to the finding's fields.
func (f Finding) MarshalJSON() ([]byte, error) {
	type plain Finding
	return json.Marshal(struct {
		plain
		AgeSeconds float64 `json:"age_seconds,omitempty"`
	}{plain(f), f.Age.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *Finding) UnmarshalJSON(b []byte) error {
	type plain Finding
	var v struct {
		plain
		AgeSeconds float64 `json:"age_seconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Finding(v.plain)
	f.Age = time.Duration(v.AgeSeconds * float64(time.Second))
	return nil
}
