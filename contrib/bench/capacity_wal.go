package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WAL bytes per event. pg_current_wal_lsn() differences count every
// session's WAL, and on a shared server the others write more than a
// measurement does (5 MB/s from other engineers' tests on the project's
// machine while this was built). So the capacity mode reads the WAL
// records themselves with pg_walinspect (PostgreSQL 15's contrib) and keeps
// those that touch the measurement's own relations, plus the commit records
// of the transactions that wrote them: exact whatever else runs. Records
// are split into full-page images (FPI), which depend on when the last
// checkpoint was, and the rest, which do not.
//
// pg_walinspect needs a superuser (or pg_read_server_files). When it is not
// installed, the mode installs it into a schema of its own
// (outboxkit_walinspect) if it may and -wal-inspect allows, and never drops
// it (another run may be using it). Without it the figure is the server's
// whole WAL over the window, an upper bound, and the report says so.

// walInspectSchema is where the capacity mode installs pg_walinspect.
const walInspectSchema = "outboxkit_walinspect"

// walProbe measures the WAL of a window.
type walProbe struct {
	admin *pgxpool.Pool
	// hold is a session holding a temporary physical replication slot,
	// advanced to each window's start, so the server keeps the window's
	// WAL until it is read: on a busy server (40 MB/s while other tests
	// ran) a segment can be recycled seconds after it was written.
	// Temporary, so the server drops it when the session ends, however it
	// ends. nil when the slot could not be made (the window's WAL may then
	// be gone before it is read, and the measurement fails saying so).
	hold *pgx.Conn
	slot string
	// fn is the qualified pg_get_wal_records_info, "" for the server-wide
	// fallback.
	fn   string
	dbID uint32
	note string
	// logf, when set, logs each inspection's duration; with debug also
	// the record types of each group.
	logf  func(format string, args ...any)
	debug bool
}

// walGroups is one window's WAL, split by what wrote it.
type walGroups struct {
	// Outbox is the records touching the named tables (heap, indexes,
	// TOAST), Other those touching the window's other relations, Commit the
	// commit records of the transactions that wrote either.
	Outbox, Other, Commit walBytes
	// Exact is false for the server-wide fallback, where everything is in
	// Outbox.
	Exact bool
}

type walBytes struct {
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`     // record bytes without full-page images
	FPI     int64 `json:"fpi_bytes"` // full-page image bytes
}

func (g walGroups) total() walBytes {
	return walBytes{Records: g.Outbox.Records + g.Other.Records + g.Commit.Records,
		Bytes: g.Outbox.Bytes + g.Other.Bytes + g.Commit.Bytes, FPI: g.Outbox.FPI + g.Other.FPI + g.Commit.FPI}
}

func newWALProbe(ctx context.Context, dsn string, admin *pgxpool.Pool, allowCreate bool) *walProbe {
	w := &walProbe{admin: admin}
	if err := admin.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&w.dbID); err != nil {
		w.note = "WAL: server-wide pg_current_wal_lsn() differences (an upper bound: other sessions' WAL included): " + err.Error()
		return w
	}
	find := func() string {
		var nsp string
		if err := admin.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_walinspect'`).Scan(&nsp); err != nil {
			return ""
		}
		return pgx.Identifier{nsp, "pg_get_wal_records_info"}.Sanitize()
	}
	w.fn = find()
	created := false
	if w.fn == "" && allowCreate {
		_, err := admin.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{walInspectSchema}.Sanitize()+`;
CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA `+pgx.Identifier{walInspectSchema}.Sanitize())
		if w.fn = find(); w.fn == "" {
			w.note = fmt.Sprintf("WAL: server-wide pg_current_wal_lsn() differences (an upper bound: other sessions' WAL included); pg_walinspect could not be installed: %v", err)
			return w
		}
		created = true
	}
	if w.fn == "" {
		w.note = "WAL: server-wide pg_current_wal_lsn() differences (an upper bound: other sessions' WAL included); -wal-inspect=false, and pg_walinspect is not installed"
		return w
	}
	// The functions need a superuser or pg_read_server_files. Try them on
	// a window that surely holds a whole record: a transactional logical
	// message, flushed by its commit. (A window ending in the middle of a
	// record, say the last 1,024 bytes before the flush position, fails
	// whenever a large record straddles it.)
	var from string
	var found int
	err := admin.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&from)
	if err == nil {
		_, err = admin.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outboxkit-capacity', 'probe')`)
	}
	if err == nil {
		err = admin.QueryRow(ctx, `SELECT count(*) FROM `+w.fn+`($1::pg_lsn, pg_current_wal_flush_lsn()) WHERE resource_manager = 'LogicalMessage'`, from).Scan(&found)
	}
	if err == nil && found == 0 {
		err = errors.New("the probe's own record was not found")
	}
	if err != nil {
		w.fn = ""
		w.note = "WAL: server-wide pg_current_wal_lsn() differences (an upper bound: other sessions' WAL included); pg_walinspect failed: " + err.Error()
		return w
	}
	w.note = "WAL: pg_walinspect, the records that touch the measurement's own relations and the commit records of their transactions"
	if hold, err := pgx.Connect(ctx, dsn); err == nil {
		w.slot = fmt.Sprintf("outboxkit_capacity_%d", hold.PgConn().PID())
		if _, err := hold.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true, true)`, w.slot); err != nil {
			hold.Close(ctx)
			w.note += "; no slot holds the windows' WAL (" + err.Error() + ")"
		} else {
			w.hold = hold
		}
	}
	if created {
		w.note += fmt.Sprintf(" (the extension was installed in schema %s for this; it is left installed)", walInspectSchema)
	}
	return w
}

// mark is the WAL position a window starts at; the slot then holds the
// WAL from there on.
func (w *walProbe) mark(ctx context.Context) (string, error) {
	var lsn string
	if err := w.admin.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return "", err
	}
	if w.hold != nil {
		// A failed advance (a target behind the slot) only keeps more WAL.
		_, _ = w.hold.Exec(ctx, `SELECT pg_replication_slot_advance($1, LEAST($2::pg_lsn, pg_current_wal_flush_lsn()))`, w.slot, lsn)
	}
	return lsn, nil
}

// close ends the session holding the slot (and with it the slot).
func (w *walProbe) close() {
	if w.hold != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.hold.Close(ctx)
	}
}

// relFilenodes lists the relations of schemas as (filenode, group): group
// "outbox" for the tables named in outbox (with their partitions, indexes
// and TOAST), "other" for the rest.
func (w *walProbe) relFilenodes(ctx context.Context, schemas, outbox []string) ([]uint32, []string, error) {
	rows, err := w.admin.Query(ctx, `WITH t AS (
	SELECT c.oid, c.relname = ANY($2) OR EXISTS (
			SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent WHERE i.inhrelid = c.oid AND p.relname = ANY($2)) AS outbox
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'm')
), rel AS (
	SELECT t.oid, t.outbox FROM t
	UNION ALL SELECT i.indexrelid, t.outbox FROM pg_index i JOIN t ON i.indrelid = t.oid
	UNION ALL SELECT c.reltoastrelid, t.outbox FROM pg_class c JOIN t ON c.oid = t.oid WHERE c.reltoastrelid <> 0
	UNION ALL SELECT i.indexrelid, t.outbox FROM pg_class c JOIN t ON c.oid = t.oid JOIN pg_index i ON i.indrelid = c.reltoastrelid WHERE c.reltoastrelid <> 0
)
SELECT pg_relation_filenode(rel.oid)::int8, CASE WHEN bool_or(rel.outbox) THEN 'outbox' ELSE 'other' END
FROM rel WHERE pg_relation_filenode(rel.oid) IS NOT NULL GROUP BY 1`, schemas, outbox)
	if err != nil {
		return nil, nil, fmt.Errorf("relations of %v: %w", schemas, err)
	}
	defer rows.Close()
	var fns []uint32
	var groups []string
	for rows.Next() {
		var fn int64
		var g string
		if err := rows.Scan(&fn, &g); err != nil {
			return nil, nil, err
		}
		fns, groups = append(fns, uint32(fn)), append(groups, g)
	}
	return fns, groups, rows.Err()
}

// measure returns the WAL written since from by the relations of schemas
// (tables named in outbox, with their indexes, form the outbox group).
// Relations rewritten since (TRUNCATE) must be listed after the rewrite:
// take the relations' filenodes as they are now.
func (w *walProbe) measure(ctx context.Context, from string, schemas, outbox []string) (walGroups, error) {
	var to string
	if err := w.admin.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&to); err != nil {
		return walGroups{}, err
	}
	if w.fn == "" {
		var d int64
		err := w.admin.QueryRow(ctx, `SELECT GREATEST(pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn), 0)::int8`, to, from).Scan(&d)
		return walGroups{Outbox: walBytes{Bytes: d}}, err
	}
	var empty bool
	if err := w.admin.QueryRow(ctx, `SELECT $1::pg_lsn <= $2::pg_lsn`, to, from).Scan(&empty); err != nil || empty {
		return walGroups{Exact: true}, err
	}
	fns, groups, err := w.relFilenodes(ctx, schemas, outbox)
	if err != nil {
		return walGroups{}, err
	}
	t0 := time.Now()
	var g walGroups
	defer func() {
		if w.logf != nil {
			w.logf("WAL inspection of %s..%s (%d relations): %s; %+v", from, to, len(fns), time.Since(t0).Round(time.Millisecond), g)
		}
	}()
	// Records of this database first (a LIKE on the block references),
	// then the relation of each reference, joined to ours by filenode.
	// Records of this database first (a string search in the block
	// references: a regular expression per record is ten times slower),
	// the relation of the first of its references, joined to ours by
	// filenode; then the commit records of the transactions that wrote
	// those.
	rows, err := w.admin.Query(ctx, `WITH rels AS (SELECT * FROM unnest($3::int8[], $4::text[]) AS x(fn, grp)),
r AS (SELECT xid::text AS x, resource_manager AS rm, record_length - fpi_length AS len, fpi_length AS fpi,
		strpos(block_ref, $5::text) AS p, block_ref
	FROM `+w.fn+`($1::pg_lsn, $2::pg_lsn)),
tagged AS (
	SELECT r.x, r.rm, r.len, r.fpi, rels.grp
	FROM r LEFT JOIN rels ON r.p > 0 AND rels.fn = NULLIF(split_part(substr(r.block_ref, r.p + length($5::text)), ' ', 1), '')::int8),
xids AS (SELECT DISTINCT x FROM tagged WHERE grp IS NOT NULL AND x <> '0')
SELECT COALESCE(grp, 'commit'), count(*), COALESCE(sum(len), 0)::int8, COALESCE(sum(fpi), 0)::int8
FROM tagged
WHERE grp IS NOT NULL OR (rm = 'Transaction' AND x IN (SELECT x FROM xids))
GROUP BY 1`, from, to, toInt64s(fns), groups, "/"+strconv.FormatUint(uint64(w.dbID), 10)+"/")
	if err != nil {
		return walGroups{}, fmt.Errorf("pg_walinspect: %w", err)
	}
	defer rows.Close()
	if w.debug {
		defer w.explain(ctx, from, to, fns, groups)
	}
	g = walGroups{Exact: true}
	for rows.Next() {
		var grp string
		var b walBytes
		if err := rows.Scan(&grp, &b.Records, &b.Bytes, &b.FPI); err != nil {
			return walGroups{}, err
		}
		switch grp {
		case "outbox":
			g.Outbox = b
		case "other":
			g.Other = b
		case "commit":
			g.Commit = b
		default:
			return walGroups{}, errors.New("pg_walinspect: unexpected group " + grp)
		}
	}
	return g, rows.Err()
}

func toInt64s(v []uint32) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// explain logs the record types of a window's groups (-v with
// OUTBOXKIT_CAPACITY_WALDEBUG=1).
func (w *walProbe) explain(ctx context.Context, from, to string, fns []uint32, groups []string) {
	rows, err := w.admin.Query(ctx, `WITH rels AS (SELECT * FROM unnest($3::int8[], $4::text[]) AS x(fn, grp)),
r AS (SELECT resource_manager AS rm, record_type AS rt, record_length AS len, strpos(block_ref, $5::text) AS p, block_ref
	FROM `+w.fn+`($1::pg_lsn, $2::pg_lsn))
SELECT rels.grp, rels.fn, r.rm, r.rt, count(*), sum(r.len)
FROM r JOIN rels ON r.p > 0 AND rels.fn = NULLIF(split_part(substr(r.block_ref, r.p + length($5::text)), ' ', 1), '')::int8
GROUP BY 1, 2, 3, 4 ORDER BY 6 DESC LIMIT 12`, from, to, toInt64s(fns), groups, "/"+strconv.FormatUint(uint64(w.dbID), 10)+"/")
	if err != nil {
		w.logf("explain: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var grp, rm, rt string
		var fn, n, l int64
		if err := rows.Scan(&grp, &fn, &rm, &rt, &n, &l); err == nil {
			w.logf("  %s filenode %d: %s %s × %d, %d B", grp, fn, rm, rt, n, l)
		}
	}
}
