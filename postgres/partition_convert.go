package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outboxkit/core"
)

// The online conversion of a plain outbox table to the partitioned layout.
//
// The plain table is not copied: it becomes the new table's partition
// <table>_legacy, covering every creation time before a cut-over, the
// first period boundary at least ConvertCutOverMargin away. Writers and
// relays keep running throughout; only the last step stops them, for as
// long as a few catalog changes take:
//
//  1. A check constraint created_at < cut-over is added NOT VALID (a
//     brief lock; from then on a row created at or after the cut-over is
//     refused by the plain table), then validated, which scans the table
//     without stopping writers. A table holding rows created at or after
//     the cut-over (a foreign writer's future times) cannot be converted:
//     the check is dropped again and the error says how many there are.
//  2. The partitioned table is created under a temporary name, with the
//     plain table's columns, defaults, checks and indexes, a default
//     partition and the partitions from the cut-over on.
//  3. In one transaction, under the plain table's ACCESS EXCLUSIVE lock
//     (waited for at most ConvertLockTimeout at a time, tried again up to
//     ConvertLockAttempts times): the identity of pos continues from the
//     plain table's, the plain table is renamed <table>_legacy (and its
//     indexes <table>_legacy_*), the partitioned one takes the table's
//     name and attaches it, the check of step 1 proving its rows belong
//     there, without a scan; the publication of migration 7, grants and
//     owner follow.
//
// Until the cut-over, every row, old or new, is in the legacy partition:
// a relay that has not yet seen the new layout (it reads it every 5 s,
// layout.go) claims as before and finds only the rows it locked. From the
// cut-over new rows go to their period's partitions, and the legacy one
// is dropped like any other once everything in it is retired (Retention,
// Partitions.Maintain), its dead letters moved first.
//
// The processed table is left as it is: plain, pruned by batched DELETE.
// A consumer database starts with a partitioned one by migrating with
// Partitions set.

// Conversion defaults.
const (
	// ConvertCutOverMargin is the least time between a conversion and its
	// cut-over: relays see the new layout well within it.
	ConvertCutOverMargin = 10 * time.Minute
	// ConvertLockTimeout bounds each wait for a lock of the conversion.
	ConvertLockTimeout = 2 * time.Second
	// ConvertLockAttempts is how often the conversion tries to take a lock
	// that timed out before it gives up.
	ConvertLockAttempts = 30
)

// ConversionReport is what ConvertToPartitioned did.
type ConversionReport struct {
	// CutOver is the boundary between the legacy partition and the first
	// period's.
	CutOver time.Time
	// Legacy names the partition holding the plain table.
	Legacy string
	// Created names the partitions created (the default one among them).
	Created []string
	// Warnings say what could not be carried over (the publication,
	// grants, owner) and what to run instead.
	Warnings []string
	// Took is how long the final step (step 3 above) held the table.
	Took time.Duration
}

// ConvertToPartitioned converts the plain outbox table of cfg (Schema,
// Table, Partitions: daily, hourly or minutes, PartitionsAhead) to the
// partitioned layout while writers and relays keep running; see above for
// how. The table must be migrated to this build's version first.
// Converting a partitioned table does nothing and returns a report
// without a cut-over.
func ConvertToPartitioned[DB Handle](ctx context.Context, db DB, cfg *MigrateConfig) (ConversionReport, error) {
	h, _, err := openHandle(db, "db")
	if err != nil {
		return ConversionReport{}, err
	}
	var c MigrateConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	if c.Partitions == PartitionNone || !c.Partitions.valid() {
		return ConversionReport{}, &core.ConfigError{Field: "Partitions", Reason: "says which layout to convert to: " + partitionedChoices}
	}
	n, err := newNames(c.Schema, c.Table)
	if err != nil {
		return ConversionReport{}, err
	}
	cv := &conversion{db: h, n: n, layout: c.Partitions, ahead: c.PartitionsAhead, log: c.Logger}
	if cv.ahead <= 0 {
		cv.ahead = DefaultPartitionsAhead(c.Partitions)
	}
	return cv.run(ctx)
}

type conversion struct {
	db     conns
	n      names
	layout Partitioning
	ahead  int
	log    *slog.Logger
	rep    ConversionReport
}

func (cv *conversion) q(name string) string { return pgx.Identifier{cv.n.schema, name}.Sanitize() }

// The names the conversion uses besides the table's.
func (cv *conversion) boundCheck() string { return cv.n.table + "_before_cutover" }
func (cv *conversion) newTable() string   { return cv.n.table + "_partitioned" }

func (cv *conversion) run(ctx context.Context) (ConversionReport, error) {
	if err := (&Store{db: cv.db, n: cv.n}).Check(ctx); err != nil {
		return cv.rep, fmt.Errorf("outboxkit/postgres: convert: %w", err)
	}
	var kind string
	if err := cv.db.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)", cv.n.outbox).Scan(&kind); err != nil {
		return cv.rep, wrap("convert: read the table's layout", err)
	}
	if kind == "p" {
		return cv.rep, nil
	}
	var now time.Time
	if err := cv.db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return cv.rep, wrap("convert: read the database's clock", err)
	}
	cut := cv.layout.start(now.Add(ConvertCutOverMargin))
	if cut.Before(now.Add(ConvertCutOverMargin)) {
		cut = cut.Add(cv.layout.period())
	}
	cv.rep.CutOver, cv.rep.Legacy = cut, legacyPartName(cv.n.table)

	// 1. The check that proves every row belongs before the cut-over.
	check := pgx.Identifier{cv.boundCheck()}.Sanitize()
	if err := cv.locked(ctx, func(tx pgx.Tx) error {
		// One left by a conversion that failed goes first.
		if _, err := tx.Exec(ctx, "ALTER TABLE "+cv.n.outbox+" DROP CONSTRAINT IF EXISTS "+check); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "ALTER TABLE "+cv.n.outbox+" ADD CONSTRAINT "+check+" CHECK (created_at < "+boundLiteral(cut)+") NOT VALID")
		return err
	}); err != nil {
		return cv.rep, wrap("convert: add the cut-over check", err)
	}
	cv.log.InfoContext(ctx, "conversion: validating the cut-over check (a scan; writers go on)", "cut_over", cut)
	if _, err := cv.db.Exec(ctx, "ALTER TABLE "+cv.n.outbox+" VALIDATE CONSTRAINT "+check); err != nil {
		var later int64
		_ = cv.db.QueryRow(ctx, "SELECT count(*) FROM "+cv.n.outbox+" WHERE created_at >= $1", cut).Scan(&later)
		_ = cv.locked(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "ALTER TABLE "+cv.n.outbox+" DROP CONSTRAINT IF EXISTS "+check)
			return err
		})
		return cv.rep, fmt.Errorf("outboxkit/postgres: convert: %d row(s) of %s were created at or after the cut-over %s (a writer's future created_at): the plain table cannot hold the history before it; fix or delete them, then convert again: %w",
			later, cv.n.outbox, cut.Format(time.RFC3339), interpretError(err))
	}

	// 2. The partitioned table, under a temporary name.
	if err := cv.createTable(ctx, cut); err != nil {
		return cv.rep, err
	}

	// 3. The swap.
	start := time.Now()
	if err := cv.locked(ctx, func(tx pgx.Tx) error { return cv.swap(ctx, tx, cut) }); err != nil {
		return cv.rep, wrap("convert: swap the tables", err)
	}
	cv.rep.Took = time.Since(start)
	cv.log.InfoContext(ctx, "converted the outbox table to the partitioned layout", "schema", cv.n.schema, "table", cv.n.table,
		"cut_over", cut, "legacy", cv.rep.Legacy, "held_for", cv.rep.Took)
	return cv.rep, nil
}

// locked runs fn in a transaction with lock_timeout ConvertLockTimeout,
// again while it fails for want of a lock, up to ConvertLockAttempts
// times.
func (cv *conversion) locked(ctx context.Context, fn func(tx pgx.Tx) error) error {
	var err error
	for range ConvertLockAttempts {
		err = pgx.BeginFunc(ctx, cv.db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(ConvertLockTimeout.Milliseconds(), 10)); err != nil {
				return err
			}
			return fn(tx)
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "55P03" { // lock_not_available
			return err
		}
		cv.log.InfoContext(ctx, "conversion: a lock was not available in time; trying again", "error", err)
	}
	return err
}

// createTable creates the partitioned table under its temporary name: the
// plain table's columns and defaults (pos keeps being an identity), its
// checks but the cut-over's, its indexes but the primary key (each
// partition has its own, the legacy one the plain table's), the default
// partition and the periods from the cut-over on.
func (cv *conversion) createTable(ctx context.Context, cut time.Time) error {
	tmp := cv.q(cv.newTable())
	return pgx.BeginFunc(ctx, cv.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+tmp); err != nil { // a conversion that failed before its swap
			return wrap("convert: drop a leftover "+tmp, err)
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE "+tmp+" (LIKE "+cv.n.outbox+" INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE (created_at)"); err != nil {
			return wrap("convert: create the partitioned table", err)
		}
		rows, err := tx.Query(ctx, `SELECT conname::text, pg_get_constraintdef(oid), convalidated FROM pg_constraint
WHERE conrelid = $1::regclass AND contype = 'c' AND conname <> $2 ORDER BY conname`, cv.n.outbox, cv.boundCheck())
		if err != nil {
			return wrap("convert: read the table's checks", err)
		}
		type con struct {
			name, def string
			valid     bool
		}
		cons, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (con, error) {
			var c con
			return c, r.Scan(&c.name, &c.def, &c.valid)
		})
		if err != nil {
			return wrap("convert: read the table's checks", err)
		}
		for _, c := range cons {
			stmt := "ALTER TABLE " + tmp + " ADD CONSTRAINT " + pgx.Identifier{c.name}.Sanitize() + " " + strings.TrimSuffix(c.def, " NOT VALID")
			if !c.valid {
				stmt += " NOT VALID"
			}
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return wrap("convert: copy check "+c.name, err)
			}
		}
		// The partitions, before the indexes, which then build on them.
		def := defaultPartName(cv.n.table)
		parts := []string{"CREATE TABLE " + cv.q(def) + " PARTITION OF " + tmp + " (PRIMARY KEY (id)) DEFAULT WITH (fillfactor = 40, autovacuum_vacuum_scale_factor = 0.02)"}
		created := []string{def}
		for i := range cv.ahead + 1 {
			lo := cut.Add(time.Duration(i) * cv.layout.period())
			name := cv.layout.partName(cv.n.table, lo)
			parts = append(parts, "CREATE TABLE "+cv.q(name)+" PARTITION OF "+tmp+" (PRIMARY KEY (id)) FOR VALUES FROM ("+boundLiteral(lo)+") TO ("+boundLiteral(lo.Add(cv.layout.period()))+") WITH (fillfactor = 40, autovacuum_vacuum_scale_factor = 0.02)")
			created = append(created, name)
		}
		for _, stmt := range parts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return wrap("convert: create a partition", err)
			}
		}
		idx, err := cv.indexes(ctx, tx)
		if err != nil {
			return err
		}
		for _, ix := range idx {
			if _, err := tx.Exec(ctx, ix.onNew(cv)); err != nil {
				return wrap("convert: create index "+ix.name, err)
			}
		}
		cv.rep.Created = created
		return nil
	})
}

// tableIndex is one of the plain table's indexes but its primary key.
type tableIndex struct {
	name, def string
}

// indexOn finds the table an index definition names ("... ON <table>
// USING ...").
var indexOn = regexp.MustCompile(`^(CREATE (?:UNIQUE )?INDEX )(\S+)( ON )(?:ONLY )?\S+( USING .*)$`)

// onNew is the index on the partitioned table, under a temporary name
// (<name>_new) until the swap.
func (ix tableIndex) onNew(cv *conversion) string {
	m := indexOn.FindStringSubmatch(ix.def)
	return m[1] + pgx.Identifier{ix.name + "_new"}.Sanitize() + m[3] + cv.q(cv.newTable()) + m[4]
}

func (cv *conversion) indexes(ctx context.Context, tx pgx.Tx) ([]tableIndex, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname::text, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass AND NOT i.indisprimary ORDER BY 1`, cv.n.outbox)
	if err != nil {
		return nil, wrap("convert: read the table's indexes", err)
	}
	idx, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tableIndex, error) {
		var ix tableIndex
		return ix, r.Scan(&ix.name, &ix.def)
	})
	if err != nil {
		return nil, wrap("convert: read the table's indexes", err)
	}
	for _, ix := range idx {
		if !indexOn.MatchString(ix.def) {
			return nil, fmt.Errorf("outboxkit/postgres: convert: cannot read the definition of index %s: %s", ix.name, ix.def)
		}
		if len(ix.name)+len("_new") > maxIdentifierBytes || len(ix.name)+len("_legacy") > maxIdentifierBytes {
			return nil, fmt.Errorf("outboxkit/postgres: convert: index %s has too long a name to be renamed: rename it, then convert again", ix.name)
		}
	}
	return idx, nil
}

// swap is step 3, in tx under lock_timeout.
func (cv *conversion) swap(ctx context.Context, tx pgx.Tx, cut time.Time) error {
	legacy, tmp := legacyPartName(cv.n.table), cv.newTable()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+cv.n.outbox+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return err
	}
	idx, err := cv.indexes(ctx, tx)
	if err != nil {
		return err
	}
	// pos goes on from the plain table's identity.
	var next int64
	if err := tx.QueryRow(ctx, "SELECT nextval(pg_get_serial_sequence($1, 'pos'))", cv.n.outbox).Scan(&next); err != nil {
		return fmt.Errorf("read the identity of pos: %w", err)
	}
	var owner, me string
	if err := tx.QueryRow(ctx, "SELECT pg_get_userbyid(relowner)::text, current_user::text FROM pg_class WHERE oid = $1::regclass", cv.n.outbox).Scan(&owner, &me); err != nil {
		return err
	}
	acl, err := cv.grants(ctx, tx, owner)
	if err != nil {
		return err
	}
	var pk string
	if err := tx.QueryRow(ctx, "SELECT conname::text FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'", cv.n.outbox).Scan(&pk); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	stmts := []string{
		"ALTER TABLE " + cv.q(tmp) + " ALTER COLUMN pos RESTART WITH " + strconv.FormatInt(next, 10),
		"ALTER TABLE " + cv.n.outbox + " RENAME TO " + pgx.Identifier{legacy}.Sanitize(),
	}
	if pk != "" {
		stmts = append(stmts, "ALTER TABLE "+cv.q(legacy)+" RENAME CONSTRAINT "+pgx.Identifier{pk}.Sanitize()+" TO "+pgx.Identifier{legacyName(cv.n.table, pk)}.Sanitize())
	}
	for _, ix := range idx {
		stmts = append(stmts,
			"ALTER INDEX "+cv.q(ix.name)+" RENAME TO "+pgx.Identifier{legacyName(cv.n.table, ix.name)}.Sanitize(),
			"ALTER INDEX "+cv.q(ix.name+"_new")+" RENAME TO "+pgx.Identifier{ix.name}.Sanitize())
	}
	stmts = append(stmts,
		"ALTER TABLE "+cv.q(tmp)+" RENAME TO "+pgx.Identifier{cv.n.table}.Sanitize(),
		"ALTER TABLE "+cv.n.outbox+" ATTACH PARTITION "+cv.q(legacy)+" FOR VALUES FROM (MINVALUE) TO ("+boundLiteral(cut)+")",
		// The partition's bound holds it now.
		"ALTER TABLE "+cv.q(legacy)+" DROP CONSTRAINT "+pgx.Identifier{cv.boundCheck()}.Sanitize(),
	)
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	cv.rep.Created = append(cv.rep.Created, legacy)
	// What may fail for want of rights, each in a savepoint: a warning
	// says what to run instead.
	optional := func(what string, stmts ...string) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		for _, stmt := range stmts {
			if _, err := sp.Exec(ctx, stmt); err != nil {
				_ = sp.Rollback(ctx)
				cv.rep.Warnings = append(cv.rep.Warnings, fmt.Sprintf("%s failed (%v): run %s", what, err, strings.Join(stmts, "; ")))
				return nil
			}
		}
		return sp.Commit(ctx)
	}
	if owner != me {
		if err := optional("giving the table to its owner", "ALTER TABLE "+cv.n.outbox+" OWNER TO "+pgx.Identifier{owner}.Sanitize()); err != nil {
			return err
		}
	}
	if len(acl) > 0 {
		if err := optional("copying the table's grants", acl...); err != nil {
			return err
		}
	}
	pub := publicationName(cv.n.schema, cv.n.table)
	var published bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)", pub).Scan(&published); err != nil {
		return err
	}
	if published {
		p := pgx.Identifier{pub}.Sanitize()
		if err := optional("moving the wake-up publication to the partitioned table",
			// Through the root first: a column list on a partitioned
			// table needs it.
			"ALTER PUBLICATION "+p+" SET (publish = 'insert', publish_via_partition_root = true)",
			"ALTER PUBLICATION "+p+" SET TABLE "+cv.n.outbox+" (id)"); err != nil {
			return err
		}
	}
	return nil
}

// legacyName renames one of the plain table's objects for the legacy
// partition: "<table>_x" becomes "<table>_legacy_x", anything else
// "<name>_legacy".
func legacyName(table, name string) string {
	if rest, ok := strings.CutPrefix(name, table+"_"); ok {
		return legacyPartName(table) + "_" + rest
	}
	return name + "_legacy"
}

// grants returns the GRANT statements that give the partitioned table
// the plain table's privileges (but its owner's).
func (cv *conversion) grants(ctx context.Context, tx pgx.Tx, owner string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END, a.privilege_type, a.is_grantable
FROM pg_class c, LATERAL aclexplode(c.relacl) a WHERE c.oid = $1::regclass`, cv.n.outbox)
	if err != nil {
		return nil, wrap("convert: read the table's grants", err)
	}
	var out []string
	var grantee, priv string
	var grantable bool
	_, err = pgx.ForEachRow(rows, []any{&grantee, &priv, &grantable}, func() error {
		if grantee == owner {
			return nil
		}
		to := "PUBLIC"
		if grantee != "PUBLIC" {
			to = pgx.Identifier{grantee}.Sanitize()
		}
		stmt := "GRANT " + priv + " ON " + cv.n.outbox + " TO " + to
		if grantable {
			stmt += " WITH GRANT OPTION"
		}
		out = append(out, stmt)
		return nil
	})
	if err != nil {
		return nil, wrap("convert: read the table's grants", err)
	}
	return out, nil
}
