package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/logs"
)

// Partition maintenance: Partitions creates the partitions of the
// periods ahead and drops those whose rows are all retired, for the
// outbox table and its processed table. Retention runs it in every pass
// on a partitioned table (so the retention leader maintains partitions);
// programs without a Retention run Maintain themselves.
//
// Every change takes a lock that stops the table's writers and relays
// while it is held (a partition's attach takes the default partition's
// ACCESS EXCLUSIVE lock to check it, a detach the table's): each runs in a
// transaction of its own with SET LOCAL lock_timeout, so waiting behind a
// long transaction stalls others for at most LockTimeout before the change
// gives up until the next pass. Once the lock is held, every change takes
// milliseconds: attaching scans the default partition (small), dropping
// a partition of any size only unlinks its files.

// DefaultPartitionLockTimeout is PartitionsConfig.LockTimeout's default.
const DefaultPartitionLockTimeout = 200 * time.Millisecond

// PartitionsConfig configures Partitions. The zero value is usable.
type PartitionsConfig struct {
	// Schema and Table name the outbox table (defaults "public",
	// "outbox_events"); its processed table is <Table>_processed.
	Schema, Table string

	// Ahead is how many periods of the outbox table after the current one
	// keep their partitions created. The processed table, when its period
	// is another (daily beside hourly or minutes), keeps as many of its
	// own periods as cover that time, and at least DefaultPartitionsAhead
	// of its period. Defaults to DefaultPartitionsAhead of each table's
	// period (2 days, 4 hours, or 30 minutes' worth of periods of
	// minutes, at least 4).
	Ahead int

	// LockTimeout bounds each wait for the lock of one partition's attach
	// or detach (lock_timeout): others queue behind a waiting change, so
	// this is the longest a change may stall them. A change that times
	// out is left for the next Maintain. Defaults to
	// DefaultPartitionLockTimeout (200ms).
	LockTimeout time.Duration

	// Logger receives a line per partition created or dropped (info) and
	// per change that failed (warn). Defaults to slog.Default() at warn
	// level.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c PartitionsConfig) WithDefaults() PartitionsConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultPartitionLockTimeout
	}
	c.Logger = logs.OrDefault(c.Logger)
	return c
}

// Partitions maintains the partitions of one partitioned outbox table and
// of its processed table. It is safe for concurrent use, but changes from
// several processes at once only fail each other's (a partition created
// twice is refused, the loser retries); run it from one (Retention's
// leader does).
type Partitions struct {
	db  conns
	cfg PartitionsConfig
	n   names
	log *slog.Logger
}

// NewPartitions returns the partition maintainer of the table in cfg (nil
// for the defaults) on db, a *pgxpool.Pool or a *sql.DB (Handle). It
// performs no I/O.
func NewPartitions[DB Handle](db DB, cfg *PartitionsConfig) (*Partitions, error) {
	h, _, err := openHandle(db, "db")
	if err != nil {
		return nil, err
	}
	return newPartitions(h, cfg)
}

func newPartitions(h conns, cfg *PartitionsConfig) (*Partitions, error) {
	var c PartitionsConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	n, err := newNames(c.Schema, c.Table)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Ahead < 0:
		return nil, &core.ConfigError{Field: "Ahead", Reason: "must not be negative (0 means the default)"}
	case c.LockTimeout < 0:
		return nil, &core.ConfigError{Field: "LockTimeout", Reason: "must not be negative (0 means the default, 200ms)"}
	}
	return &Partitions{db: h, cfg: c, n: n, log: c.Logger.With("schema", c.Schema, "table", c.Table)}, nil
}

// PartitionInfo is one partition of the outbox or processed table.
type PartitionInfo struct {
	// Table is the partitioned table's name: the outbox table's, or
	// <table>_processed.
	Table string
	// Name is the partition's (unqualified) name.
	Name string
	// Default is the default partition: rows no other partition covers.
	Default bool
	// Legacy is the outbox table's partition that holds the plain table
	// ConvertToPartitioned attached, from the beginning of time.
	Legacy bool
	// From and To bound the period the partition covers, in created_at
	// (outbox) or in the time an event ID starts with (processed). From
	// is zero for the legacy partition; both are zero for the default.
	From, To time.Time
}

// PartitionMaintenance says which partitions Maintain may drop.
type PartitionMaintenance struct {
	// PublishedBefore, when set, drops outbox partitions that cover no
	// time after it and hold neither pending nor leased events nor any
	// published at or after it; their dead letters are moved to the
	// default partition first, with their IDs, so they stay replayable.
	PublishedBefore time.Time
	// ProcessedBefore, when set, drops processed-table partitions that
	// cover no time after it and hold no record processed at or after it.
	ProcessedBefore time.Time
}

// PartitionReport is what one Maintain did.
type PartitionReport struct {
	// Outbox and Processed are the two tables' layouts; a plain table is
	// left alone.
	Outbox, Processed Partitioning
	// Created and Dropped name the partitions created and dropped.
	Created, Dropped []string
	// Analyzed names the partitions given their first statistics (see
	// analyzeCurrent).
	Analyzed []string
	// DeadLettersMoved counts the dead letters moved out of dropped
	// partitions into the default partition.
	DeadLettersMoved int64
	// Prune names (qualified) the partitions whose retired rows are
	// deleted row by row, in batches, as on the plain layout: the default
	// partition, the legacy one, and any partition due to be dropped that
	// still holds rows to keep (a pending event, a replay). Retention
	// prunes them; processed-table ones are in PruneProcessed.
	Prune, PruneProcessed []string
	// Failed counts the changes that failed (a lock not obtained within
	// LockTimeout, say); Maintain tries them again next time. Err is the
	// first failure.
	Failed int
	Err    error
}

// partTable is one of the two partitioned tables, as Maintain sees it.
type partTable struct {
	name      string // unqualified
	qualified string
	processed bool
	layout    Partitioning // PartitionNone: not partitioned
	parts     []PartitionInfo
}

// List returns the partitions of the outbox table and of its processed
// table (none for a plain table), each table's in order of their periods,
// the default partition last.
func (p *Partitions) List(ctx context.Context) ([]PartitionInfo, error) {
	var out []PartitionInfo
	for _, processed := range []bool{false, true} {
		t, err := p.table(ctx, processed)
		if err != nil {
			return nil, err
		}
		out = append(out, t.parts...)
	}
	return out, nil
}

// ListOutbox returns the outbox table's layout and its partitions (none
// for a plain table), in order of their periods, the default partition
// last: List for the outbox table alone.
func (p *Partitions) ListOutbox(ctx context.Context) (Partitioning, []PartitionInfo, error) {
	t, err := p.table(ctx, false)
	return t.layout, t.parts, err
}

// Layout returns the outbox table's layout: PartitionNone for a plain
// table, and the period of its partitions otherwise.
func (p *Partitions) Layout(ctx context.Context) (Partitioning, error) {
	t, err := p.table(ctx, false)
	return t.layout, err
}

func (p *Partitions) table(ctx context.Context, processed bool) (partTable, error) {
	t := partTable{name: p.n.table, qualified: p.n.outbox, processed: processed}
	cast := "timestamptz"
	if processed {
		t.name, t.qualified, cast = p.n.table+"_processed", p.n.processed, "uuid"
	}
	var kind pgtype.Text
	if err := p.db.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)", t.qualified).Scan(&kind); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return t, wrap("partitions: read the layout of "+t.qualified, err)
	}
	if !kind.Valid {
		return t, fmt.Errorf("outboxkit/postgres: partitions: table %s does not exist: %w", t.qualified, ErrNotMigrated)
	}
	if kind.String != "p" {
		return t, nil
	}
	// The bounds as the catalog prints them, read back by the same
	// session's input function: exact whatever its TimeZone. A partition
	// dropped while the statement runs is still in its catalog snapshot,
	// but pg_get_expr finds no relation to print its bound for and
	// returns NULL: such a partition is gone, and is left out.
	rows, err := p.db.Query(ctx, `SELECT c.relname::text, b.def = 'DEFAULT',
	CASE WHEN m.v[1] = 'MINVALUE' THEN NULL ELSE btrim(m.v[1], '''')::`+cast+` END,
	CASE WHEN m.v[2] = 'MAXVALUE' THEN NULL ELSE btrim(m.v[2], '''')::`+cast+` END
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid AND c.relkind = 'r'
CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid, true) AS b(def)
LEFT JOIN LATERAL regexp_match(b.def, '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m(v) ON true
WHERE i.inhparent = to_regclass($1) AND b.def IS NOT NULL`, t.qualified)
	if err != nil {
		return t, wrap("partitions: list the partitions of "+t.qualified, err)
	}
	defer rows.Close()
	for rows.Next() {
		pi := PartitionInfo{Table: t.name}
		var lo, hi any
		if processed {
			var l, h pgtype.UUID
			lo, hi = &l, &h
			if err := rows.Scan(&pi.Name, &pi.Default, lo, hi); err != nil {
				return t, wrap("partitions: list the partitions of "+t.qualified, err)
			}
			if l.Valid {
				pi.From = uuidTime(l.Bytes)
			}
			if h.Valid {
				pi.To = uuidTime(h.Bytes)
			}
		} else {
			var l, h pgtype.Timestamptz
			if err := rows.Scan(&pi.Name, &pi.Default, &l, &h); err != nil {
				return t, wrap("partitions: list the partitions of "+t.qualified, err)
			}
			if l.Valid && l.InfinityModifier == pgtype.Finite {
				pi.From = l.Time.UTC()
			}
			if h.Valid && h.InfinityModifier == pgtype.Finite {
				pi.To = h.Time.UTC()
			}
		}
		pi.Legacy = !pi.Default && pi.From.IsZero() && pi.Name == legacyPartName(t.name)
		t.parts = append(t.parts, pi)
	}
	if err := rows.Err(); err != nil {
		return t, wrap("partitions: list the partitions of "+t.qualified, err)
	}
	slices.SortFunc(t.parts, func(a, b PartitionInfo) int {
		if a.Default != b.Default {
			if a.Default {
				return 1
			}
			return -1
		}
		return a.From.Compare(b.From)
	})
	// The period is the width of the newest finite partition.
	t.layout = PartitionDaily
	for i := len(t.parts) - 1; i >= 0; i-- {
		if pi := t.parts[i]; !pi.Default && !pi.From.IsZero() && !pi.To.IsZero() {
			t.layout = layoutOfPeriod(pi.To.Sub(pi.From))
			break
		}
	}
	return t, nil
}

// layoutOfPeriod is the layout whose partitions are d wide: daily for a
// width no layout has (a partition someone created by hand).
func layoutOfPeriod(d time.Duration) Partitioning {
	switch {
	case d == time.Hour:
		return PartitionHourly
	case d > 0 && d < time.Hour && d%time.Minute == 0:
		if p := PartitionMinutes(int(d / time.Minute)); p.valid() {
			return p
		}
	}
	return PartitionDaily
}

// Create creates the partitions that cover [from, to) and do not exist
// yet, of both tables (those that are partitioned), each in its own
// period (the processed table's are days on a new schema). Rows
// of those periods already in the default partition are moved into them.
// It returns the names of the partitions created. Use it to prepare for
// events written with creation times outside the periods maintained (a
// backfill); Maintain creates the current and next periods' by itself.
func (p *Partitions) Create(ctx context.Context, from, to time.Time) ([]string, error) {
	var created []string
	for _, processed := range []bool{false, true} {
		t, err := p.table(ctx, processed)
		if err != nil {
			return created, err
		}
		if t.layout == PartitionNone {
			continue
		}
		c, err := p.create(ctx, t, from, to)
		created = append(created, c...)
		if err != nil {
			return created, err
		}
	}
	return created, nil
}

// create creates t's missing partitions over [from, to).
func (p *Partitions) create(ctx context.Context, t partTable, from, to time.Time) ([]string, error) {
	var created []string
	for lo := t.layout.start(from); lo.Before(to); lo = lo.Add(t.layout.period()) {
		hi := lo.Add(t.layout.period())
		if covered(t.parts, lo, hi) {
			continue
		}
		name := t.layout.partName(t.name, lo)
		if err := p.createOne(ctx, t, name, lo, hi); err != nil {
			return created, err
		}
		created = append(created, name)
		t.parts = append(t.parts, PartitionInfo{Table: t.name, Name: name, From: lo, To: hi})
		p.log.InfoContext(ctx, "created partition", "partition", name, "from", lo, "to", hi)
	}
	return created, nil
}

// covered is whether some partition of parts overlaps [lo, hi): then
// there is nothing to create for it (and creating would be refused).
func covered(parts []PartitionInfo, lo, hi time.Time) bool {
	for _, pi := range parts {
		if pi.Default {
			continue
		}
		if (pi.From.IsZero() || pi.From.Before(hi)) && (pi.To.IsZero() || lo.Before(pi.To)) {
			return true
		}
	}
	return false
}

// createOne creates one partition: a table like the partitioned one,
// filled with the rows of its period that went to the default partition,
// then attached, which takes the default partition's ACCESS EXCLUSIVE
// lock while it checks that nothing of the period is left there. A table
// attached takes the table's indexes (built on its few rows) and keeps
// its own primary key: the outbox partitions' on id (partition.go).
func (p *Partitions) createOne(ctx context.Context, t partTable, name string, lo, hi time.Time) error {
	part := pgx.Identifier{p.n.schema, name}.Sanitize()
	def := pgx.Identifier{p.n.schema, defaultPartName(t.name)}.Sanitize()
	var loArg, hiArg any = lo, hi
	key, with, pk := "created_at", " WITH (fillfactor = 40, autovacuum_vacuum_scale_factor = 0.02)", "ALTER TABLE "+part+" ADD PRIMARY KEY (id)"
	if t.processed {
		loArg, hiArg, key, with, pk = uuidAt(lo), uuidAt(hi), "event_id", "", ""
	}
	return p.inTx(ctx, func(tx pgx.Tx) error {
		stmts := []string{"CREATE TABLE " + part + " (LIKE " + t.qualified + " INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)" + with}
		if pk != "" {
			stmts = append(stmts, pk)
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		// A default partition exists in every table the migrations or a
		// conversion partitioned; without one there is nothing to move.
		var hasDefault bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", def).Scan(&hasDefault); err != nil {
			return err
		}
		if hasDefault {
			if _, err := tx.Exec(ctx, `WITH m AS (DELETE FROM `+def+` WHERE `+key+` >= $1 AND `+key+` < $2 RETURNING *)
INSERT INTO `+part+` SELECT * FROM m`, loArg, hiArg); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, "ALTER TABLE "+t.qualified+" ATTACH PARTITION "+part+" FOR VALUES FROM ("+boundLiteral(loArg)+") TO ("+boundLiteral(hiArg)+")")
		return err
	})
}

// boundLiteral is a partition bound as SQL text: a timestamp in UTC or a
// UUID, neither of which can hold a quote.
func boundLiteral(v any) string {
	switch b := v.(type) {
	case time.Time:
		return "'" + b.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'"
	case pgtype.UUID:
		u := b.Bytes
		return fmt.Sprintf("'%x-%x-%x-%x-%x'", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	}
	panic(fmt.Sprintf("outboxkit/postgres: no bound literal for %T", v))
}

// inTx runs fn in a transaction with the lock timeout set.
func (p *Partitions) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ms := max(p.cfg.LockTimeout.Milliseconds(), 1)
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(ms, 10)); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// errKept stops a drop whose partition, locked, still holds rows to keep.
var errKept = errors.New("outboxkit/postgres: the partition holds rows to keep")

// Maintain creates the partitions of the current period and of the
// periods ahead that are missing, and drops those req says are retired,
// of both tables (each only if it is partitioned). A change that fails
// (a lock not obtained within LockTimeout, say) is counted in the
// report's Failed and left for the next call; the others go on. The
// error is for what stops Maintain altogether: a table missing, or the
// database unreachable.
func (p *Partitions) Maintain(ctx context.Context, req PartitionMaintenance) (PartitionReport, error) {
	var rep PartitionReport
	var now time.Time
	if err := p.db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return rep, wrap("partitions: read the database's clock", err)
	}
	for _, processed := range []bool{false, true} {
		t, err := p.table(ctx, processed)
		if err != nil {
			return rep, err
		}
		if processed {
			rep.Processed = t.layout
		} else {
			rep.Outbox = t.layout
		}
		if t.layout == PartitionNone {
			continue
		}
		// Each table in its own period, as its partitions say: Ahead
		// counts the outbox table's.
		ahead := aheadOf(t.layout, rep.Outbox, p.cfg.Ahead)
		start := t.layout.start(now)
		for lo := start; lo.Before(start.Add(time.Duration(ahead+1) * t.layout.period())); lo = lo.Add(t.layout.period()) {
			c, err := p.create(ctx, t, lo, lo.Add(t.layout.period()))
			if err != nil {
				rep.fail(err)
				p.log.WarnContext(ctx, "could not create a partition; trying again at the next pass", "partition", t.layout.partName(t.name, lo), "error", err)
				continue
			}
			rep.Created = append(rep.Created, c...)
			if len(c) > 0 {
				t.parts = append(t.parts, PartitionInfo{Table: t.name, Name: c[0], From: lo, To: lo.Add(t.layout.period())})
			}
		}
		if a, err := p.analyzeCurrent(ctx, t, now); err != nil {
			rep.fail(err)
			p.log.WarnContext(ctx, "could not analyze the current period's partition; trying again at the next pass", "error", err)
		} else if a != "" {
			rep.Analyzed = append(rep.Analyzed, a)
		}
		before := req.PublishedBefore
		if processed {
			before = req.ProcessedBefore
		}
		for _, pi := range t.parts {
			qualified := pgx.Identifier{p.n.schema, pi.Name}.Sanitize()
			switch {
			case pi.Default:
			case before.IsZero() || pi.To.IsZero() || pi.To.After(before):
				continue // not retired yet
			default:
				moved, err := p.drop(ctx, t, pi, before)
				switch {
				case err == nil:
					rep.Dropped = append(rep.Dropped, pi.Name)
					rep.DeadLettersMoved += moved
					p.log.InfoContext(ctx, "dropped partition", "partition", pi.Name, "dead_letters_moved", moved)
					continue
				case errors.Is(err, errKept):
				default:
					rep.fail(err)
					p.log.WarnContext(ctx, "could not drop a partition; trying again at the next pass", "partition", pi.Name, "error", err)
				}
			}
			// Kept: pruned row by row.
			if processed {
				rep.PruneProcessed = append(rep.PruneProcessed, qualified)
			} else {
				rep.Prune = append(rep.Prune, qualified)
			}
		}
	}
	return rep, nil
}

func (r *PartitionReport) fail(err error) {
	if r.Failed == 0 {
		r.Err = err
	}
	r.Failed++
}

// drop detaches and drops one retired partition, moving its dead letters
// to the default partition first (outbox), and returns how many it moved.
// What it holds is checked once before the lock, so that a partition still
// in use costs no lock, and again under it, where nothing can change:
// errKept when it holds a pending or leased event, or one published (a
// record processed) at or after before.
func (p *Partitions) drop(ctx context.Context, t partTable, pi PartitionInfo, before time.Time) (int64, error) {
	part := pgx.Identifier{p.n.schema, pi.Name}.Sanitize()
	check := `SELECT ` + pendingProbe(part) + ` IS NOT NULL
	OR COALESCE((SELECT max(published_at) FROM ` + part + ` WHERE published_at IS NOT NULL) >= $1, false)`
	if t.processed {
		check = `SELECT COALESCE((SELECT max(processed_at) FROM ` + part + `) >= $1, false)`
	}
	keep := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) error {
		var kept bool
		if err := q.QueryRow(ctx, check, before).Scan(&kept); err != nil {
			return err
		}
		if kept {
			return errKept
		}
		return nil
	}
	if err := keep(p.db); err != nil {
		return 0, err
	}
	var moved int64
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "ALTER TABLE "+t.qualified+" DETACH PARTITION "+part); err != nil {
			return err
		}
		if err := keep(tx); err != nil {
			return err
		}
		if !t.processed {
			// No partition covers the period any more: the INSERT routes
			// them to the default partition.
			tag, err := tx.Exec(ctx, `INSERT INTO `+t.qualified+` (`+allColumns+`) SELECT `+allColumns+` FROM `+part+` WHERE dead_at IS NOT NULL`)
			if err != nil {
				return err
			}
			moved = tag.RowsAffected()
		}
		_, err := tx.Exec(ctx, "DROP TABLE "+part)
		return err
	})
	return moved, err
}

// allColumns is every column of the outbox table, in order.
const allColumns = `id, event_type, schema_version, payload, created_at, published_at, attempts, lease_token, lease_until, last_error,
	source, aggregate_type, aggregate_id, sequence, headers, destination, available_at, dead_at, pos`

// partitionPruneSQL deletes one bounded batch of published rows of one
// partition, as pruneSQL does for the plain table; within a partition an
// ID is unique.
func partitionPruneSQL(part string) string {
	return `DELETE FROM ` + part + `
WHERE id = ANY(ARRAY(
	SELECT id FROM ` + part + `
	WHERE published_at < $1
	ORDER BY published_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED))`
}

// partitionPruneProcessedSQL is the Deduper's prune for one partition.
func partitionPruneProcessedSQL(part string) string {
	return `DELETE FROM ` + part + ` t USING (
SELECT consumer, event_id FROM ` + part + ` WHERE processed_at < $1 ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED
) v WHERE t.consumer = v.consumer AND t.event_id = v.event_id`
}

// analyzeCurrent runs ANALYZE on the current period's partition of t once
// it holds plannedRows rows or more while its statistics say fewer (it was
// created empty, ahead of its period), and returns its name if it did.
// Autovacuum does the same where it runs; where it does not, a prepared
// statement's plan made while the partition was empty would scan it whole
// as it fills (createdfloor.go), and the relays' stores plan every
// statement anew until it is done. ANALYZE samples the partition (30,000
// rows at most), and invalidates the plans made before.
func (p *Partitions) analyzeCurrent(ctx context.Context, t partTable, now time.Time) (string, error) {
	var cur *PartitionInfo
	for i, pi := range t.parts {
		if !pi.Default && !pi.From.IsZero() && !pi.From.After(now) && pi.To.After(now) {
			cur = &t.parts[i]
		}
	}
	if cur == nil {
		return "", nil
	}
	part := pgx.Identifier{p.n.schema, cur.Name}.Sanitize()
	var due bool
	err := p.db.QueryRow(ctx, `SELECT c.reltuples < $2 AND COALESCE(s.n_mod_since_analyze, 0) >= $2
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = $1::regclass`, part, float32(plannedRows)).Scan(&due)
	if err != nil || !due {
		return "", err
	}
	if _, err := p.db.Exec(ctx, "ANALYZE "+part); err != nil {
		return "", err
	}
	return cur.Name, nil
}
