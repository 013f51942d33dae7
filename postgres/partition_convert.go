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
// The processed table beside it (<table>_processed, migration 3) is
// converted the same way after it, by day as the migrations partition it:
// the plain table becomes <table>_processed_legacy, holding every event ID
// below the smallest UUID v7 of its cut-over (the first midnight UTC at
// least ConvertCutOverMargin away), the partitioned table gets a default
// partition and the days from the cut-over on. Its check is event_id <
// that UUID, which holds for the records of UUID v7 events (core.NewID)
// written before the cut-over: from the check's creation until the swap,
// the plain table refuses a record of an event ID at or above it (a
// random UUID, or a UUID v7 from a clock running ahead), so the
// consumer's transaction fails and its delivery is retried, to succeed
// once the swap is done. A processed table holding such records already
// (a consumer of random IDs, gen_random_uuid() in plain SQL) is not
// converted: the report's warning says so and it stays plain, pruned by
// batched DELETE, which is correct, only slower. A consumer database
// migrated with Partitions set starts with a partitioned one.

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
	// grants, owner, a processed table holding IDs that are not UUID
	// v7) and what to run instead.
	Warnings []string
	// Took is how long the final step (step 3 above) held the table.
	Took time.Duration
	// Processed is the processed table's conversion, nil when it was
	// not converted: already partitioned, or holding records it cannot
	// convert (Warnings says why). Its own CutOver is a midnight UTC.
	Processed *ConversionReport
}

// ConvertToPartitioned converts the plain outbox table of cfg (Schema,
// Table, Partitions: daily, hourly or minutes, PartitionsAhead) and its
// processed table (by day) to the partitioned layout while writers,
// relays and consumers keep running; see above for how. The tables must
// be migrated to this build's version first. A table already partitioned
// is left as it is: converting twice does nothing the second time and
// returns a report without a cut-over.
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
	if err := (&Store{db: h, n: n}).Check(ctx); err != nil {
		return ConversionReport{}, fmt.Errorf("outboxkit/postgres: convert: %w", err)
	}
	ahead := c.PartitionsAhead
	if ahead <= 0 {
		ahead = DefaultPartitionsAhead(c.Partitions)
	}
	outbox := &conversion{db: h, n: n, t: outboxConvTable(n), layout: c.Partitions, ahead: ahead, log: c.Logger}
	rep, err := outbox.run(ctx)
	if err != nil {
		return rep, err
	}
	processed := &conversion{db: h, n: n, t: processedConvTable(n), layout: c.Partitions.processedLayout(),
		ahead: aheadOf(c.Partitions.processedLayout(), c.Partitions, c.PartitionsAhead), log: c.Logger}
	prep, err := processed.run(ctx)
	switch {
	case errors.Is(err, errNotConvertible):
		rep.Warnings = append(rep.Warnings, prep.Warnings...)
		return rep, nil
	case err != nil:
		return rep, err
	}
	if !prep.CutOver.IsZero() {
		rep.Processed = &prep
	}
	return rep, nil
}

// errNotConvertible is a processed table whose records the conversion
// cannot split at a cut-over: left plain, with a warning.
var errNotConvertible = errors.New("outboxkit/postgres: convert: the processed table holds event IDs at or above its cut-over")

// convTable is the table a conversion converts: what differs between the
// outbox table and its processed table.
type convTable struct {
	name, qualified string // the table's, unqualified and qualified
	key             string // the partition key's column
	// bound is the key's value at a period boundary, as SQL text.
	bound func(time.Time) string
	// partKey and partWith are what a partition's CREATE TABLE adds
	// after "PARTITION OF <table>" (before its bound) and at its end.
	partKey, partWith string
	// identity copies the identity of pos (the outbox table's).
	identity bool
	// pkOnParent gives the partitioned table the plain table's primary
	// key (the processed table's, which holds the partition key); the
	// outbox table's partitions have each their own on id (partition.go).
	pkOnParent string
	what       string // for the log
	processed  bool
}

func outboxConvTable(n names) convTable {
	return convTable{name: n.table, qualified: n.outbox, key: "created_at",
		bound:    func(t time.Time) string { return boundLiteral(t) },
		partKey:  " (PRIMARY KEY (id))",
		partWith: " WITH (fillfactor = 40, autovacuum_vacuum_scale_factor = 0.02)",
		identity: true, what: "outbox table"}
}

func processedConvTable(n names) convTable {
	return convTable{name: n.table + "_processed", qualified: n.processed, key: "event_id",
		bound:      func(t time.Time) string { return boundLiteral(uuidAt(t)) },
		pkOnParent: "PRIMARY KEY (consumer, event_id)",
		what:       "processed table", processed: true}
}

type conversion struct {
	db     conns
	n      names
	t      convTable
	layout Partitioning
	ahead  int
	log    *slog.Logger
	rep    ConversionReport
}

func (cv *conversion) q(name string) string { return pgx.Identifier{cv.n.schema, name}.Sanitize() }

// The names the conversion uses besides the table's.
func (cv *conversion) boundCheck() string { return cv.t.name + "_before_cutover" }
func (cv *conversion) newTable() string   { return cv.t.name + "_partitioned" }

func (cv *conversion) run(ctx context.Context) (ConversionReport, error) {
	var kind string
	if err := cv.db.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)", cv.t.qualified).Scan(&kind); err != nil {
		return cv.rep, wrap("convert: read the "+cv.t.what+"'s layout", err)
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
	cv.rep.CutOver, cv.rep.Legacy = cut, legacyPartName(cv.t.name)

	// 1. The check that proves every row belongs before the cut-over.
	if cv.t.processed {
		// Records of IDs that are not UUID v7 lie anywhere: seen first,
		// without the check, which would refuse their consumers' new
		// records while it is validated.
		var later int64
		if err := cv.db.QueryRow(ctx, "SELECT count(*) FROM "+cv.t.qualified+" WHERE event_id >= "+cv.t.bound(cut)).Scan(&later); err != nil {
			return cv.rep, wrap("convert: read the processed table's event IDs", err)
		}
		if later > 0 {
			return cv.notConvertible(ctx, later, cut)
		}
	}
	check := pgx.Identifier{cv.boundCheck()}.Sanitize()
	if err := cv.locked(ctx, func(tx pgx.Tx) error {
		// One left by a conversion that failed goes first.
		if _, err := tx.Exec(ctx, "ALTER TABLE "+cv.t.qualified+" DROP CONSTRAINT IF EXISTS "+check); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "ALTER TABLE "+cv.t.qualified+" ADD CONSTRAINT "+check+" CHECK ("+cv.t.key+" < "+cv.t.bound(cut)+") NOT VALID")
		return err
	}); err != nil {
		return cv.rep, wrap("convert: add the "+cv.t.what+"'s cut-over check", err)
	}
	cv.log.InfoContext(ctx, "conversion: validating the cut-over check (a scan; writers go on)", "table", cv.t.name, "cut_over", cut)
	if _, err := cv.db.Exec(ctx, "ALTER TABLE "+cv.t.qualified+" VALIDATE CONSTRAINT "+check); err != nil {
		var later int64
		_ = cv.db.QueryRow(ctx, "SELECT count(*) FROM "+cv.t.qualified+" WHERE "+cv.t.key+" >= "+cv.t.bound(cut)).Scan(&later)
		_ = cv.locked(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "ALTER TABLE "+cv.t.qualified+" DROP CONSTRAINT IF EXISTS "+check)
			return err
		})
		if cv.t.processed {
			return cv.notConvertible(ctx, later, cut)
		}
		return cv.rep, fmt.Errorf("outboxkit/postgres: convert: %d row(s) of %s were created at or after the cut-over %s (a writer's future created_at): the plain table cannot hold the history before it; fix or delete them, then convert again: %w",
			later, cv.t.qualified, cut.Format(time.RFC3339), interpretError(err))
	}

	// 2. The partitioned table, under a temporary name.
	if err := cv.createTable(ctx, cut); err != nil {
		return cv.rep, err
	}

	// 3. The swap.
	start := time.Now()
	if err := cv.locked(ctx, func(tx pgx.Tx) error { return cv.swap(ctx, tx, cut) }); err != nil {
		return cv.rep, wrap("convert: swap the "+cv.t.what+"s", err)
	}
	cv.rep.Took = time.Since(start)
	cv.log.InfoContext(ctx, "converted the "+cv.t.what+" to the partitioned layout", "schema", cv.n.schema, "table", cv.t.name,
		"cut_over", cut, "legacy", cv.rep.Legacy, "held_for", cv.rep.Took)
	return cv.rep, nil
}

// notConvertible is the processed table left plain: later of its records
// have event IDs at or above the cut-over's.
func (cv *conversion) notConvertible(ctx context.Context, later int64, cut time.Time) (ConversionReport, error) {
	cv.rep = ConversionReport{Warnings: []string{fmt.Sprintf(
		"the processed table %s stays plain: %d of its records have event IDs at or above %s, the smallest UUID v7 of its cut-over %s (IDs that are not UUID v7, or from a clock ahead), which a partition of the days before the cut-over cannot hold; it is pruned by batched DELETE as before",
		cv.t.qualified, later, cv.t.bound(cut), cut.Format(time.RFC3339))}}
	cv.log.WarnContext(ctx, cv.rep.Warnings[0])
	return cv.rep, errNotConvertible
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
// plain table's columns and defaults (the outbox table's pos keeps being
// an identity), its checks but the cut-over's, its indexes but the
// primary key (each outbox partition has its own, the legacy one the
// plain table's; the processed table's is the partitioned table's, which
// the legacy partition's joins), the default partition and the periods
// from the cut-over on.
func (cv *conversion) createTable(ctx context.Context, cut time.Time) error {
	tmp := cv.q(cv.newTable())
	return pgx.BeginFunc(ctx, cv.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+tmp); err != nil { // a conversion that failed before its swap
			return wrap("convert: drop a leftover "+tmp, err)
		}
		like := "INCLUDING DEFAULTS"
		if cv.t.identity {
			like += " INCLUDING IDENTITY"
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE "+tmp+" (LIKE "+cv.t.qualified+" "+like+") PARTITION BY RANGE ("+cv.t.key+")"); err != nil {
			return wrap("convert: create the partitioned table", err)
		}
		if cv.t.pkOnParent != "" {
			if _, err := tx.Exec(ctx, "ALTER TABLE "+tmp+" ADD "+cv.t.pkOnParent); err != nil {
				return wrap("convert: the partitioned table's primary key", err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT conname::text, pg_get_constraintdef(oid), convalidated FROM pg_constraint
WHERE conrelid = $1::regclass AND contype = 'c' AND conname <> $2 ORDER BY conname`, cv.t.qualified, cv.boundCheck())
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
		def := defaultPartName(cv.t.name)
		parts := []string{"CREATE TABLE " + cv.q(def) + " PARTITION OF " + tmp + cv.t.partKey + " DEFAULT" + cv.t.partWith}
		created := []string{def}
		for i := range cv.ahead + 1 {
			lo := cut.Add(time.Duration(i) * cv.layout.period())
			name := cv.layout.partName(cv.t.name, lo)
			parts = append(parts, "CREATE TABLE "+cv.q(name)+" PARTITION OF "+tmp+cv.t.partKey+" FOR VALUES FROM ("+cv.t.bound(lo)+") TO ("+cv.t.bound(lo.Add(cv.layout.period()))+")"+cv.t.partWith)
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
WHERE i.indrelid = $1::regclass AND NOT i.indisprimary ORDER BY 1`, cv.t.qualified)
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
	legacy, tmp := legacyPartName(cv.t.name), cv.newTable()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+cv.t.qualified+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return err
	}
	idx, err := cv.indexes(ctx, tx)
	if err != nil {
		return err
	}
	var stmts []string
	if cv.t.identity {
		// pos goes on from the plain table's identity.
		var next int64
		if err := tx.QueryRow(ctx, "SELECT nextval(pg_get_serial_sequence($1, 'pos'))", cv.t.qualified).Scan(&next); err != nil {
			return fmt.Errorf("read the identity of pos: %w", err)
		}
		stmts = append(stmts, "ALTER TABLE "+cv.q(tmp)+" ALTER COLUMN pos RESTART WITH "+strconv.FormatInt(next, 10))
	}
	var owner, me string
	if err := tx.QueryRow(ctx, "SELECT pg_get_userbyid(relowner)::text, current_user::text FROM pg_class WHERE oid = $1::regclass", cv.t.qualified).Scan(&owner, &me); err != nil {
		return err
	}
	acl, err := cv.grants(ctx, tx, owner)
	if err != nil {
		return err
	}
	pkOf := func(table string) (string, error) {
		var pk string
		if err := tx.QueryRow(ctx, "SELECT conname::text FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'", table).Scan(&pk); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return "", err
		}
		return pk, nil
	}
	pk, err := pkOf(cv.t.qualified)
	if err != nil {
		return err
	}
	stmts = append(stmts, "ALTER TABLE "+cv.t.qualified+" RENAME TO "+pgx.Identifier{legacy}.Sanitize())
	if pk != "" {
		stmts = append(stmts, "ALTER TABLE "+cv.q(legacy)+" RENAME CONSTRAINT "+pgx.Identifier{pk}.Sanitize()+" TO "+pgx.Identifier{legacyName(cv.t.name, pk)}.Sanitize())
	}
	if cv.t.pkOnParent != "" && pk != "" {
		// The partitioned table's primary key takes the plain table's
		// name, free once that one is renamed.
		newPK, err := pkOf(cv.q(tmp))
		if err != nil {
			return err
		}
		stmts = append(stmts, "ALTER TABLE "+cv.q(tmp)+" RENAME CONSTRAINT "+pgx.Identifier{newPK}.Sanitize()+" TO "+pgx.Identifier{pk}.Sanitize())
	}
	for _, ix := range idx {
		stmts = append(stmts,
			"ALTER INDEX "+cv.q(ix.name)+" RENAME TO "+pgx.Identifier{legacyName(cv.t.name, ix.name)}.Sanitize(),
			"ALTER INDEX "+cv.q(ix.name+"_new")+" RENAME TO "+pgx.Identifier{ix.name}.Sanitize())
	}
	stmts = append(stmts,
		"ALTER TABLE "+cv.q(tmp)+" RENAME TO "+pgx.Identifier{cv.t.name}.Sanitize(),
		"ALTER TABLE "+cv.t.qualified+" ATTACH PARTITION "+cv.q(legacy)+" FOR VALUES FROM (MINVALUE) TO ("+cv.t.bound(cut)+")",
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
		if err := optional("giving the "+cv.t.what+" to its owner", "ALTER TABLE "+cv.t.qualified+" OWNER TO "+pgx.Identifier{owner}.Sanitize()); err != nil {
			return err
		}
	}
	if len(acl) > 0 {
		if err := optional("copying the "+cv.t.what+"'s grants", acl...); err != nil {
			return err
		}
	}
	if cv.t.processed {
		return nil
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
FROM pg_class c, LATERAL aclexplode(c.relacl) a WHERE c.oid = $1::regclass`, cv.t.qualified)
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
		stmt := "GRANT " + priv + " ON " + cv.t.qualified + " TO " + to
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
