package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The checks of Doctor (doctor.go), one method each.

// smallTablePages is the size (1 MiB) below which a scan of the whole
// outbox table is as cheap as any index: generic plans and statistics
// only matter beyond it (plans.go: plans switch to row addresses at 30 to
// 50 pages).
const smallTablePages = 128

// us is a duration as microseconds, the unit the checks' SQL multiplies
// by interval '1 microsecond'.
func us(d time.Duration) int64 { return d.Microseconds() }

// tableFacts are the outbox table's catalog and statistics facts.
type tableFacts struct {
	pages                        int64
	tuples                       float64
	size, total                  int64
	options                      map[string]string
	live, dead, modSinceAnalyze  int64
	lastVacuum, lastAutovacuum   time.Time
	lastAnalyze, lastAutoanalyze time.Time
	// partitioned: the outbox is the parent of the partitioned layout,
	// whose rows, pages and statistics are its partitions'.
	partitioned bool
	// now is the database's clock when the facts were read.
	now time.Time
}

// lastVacuumed is the latest vacuum of either kind, zero when never.
func (t *tableFacts) lastVacuumed() time.Time {
	if t.lastAutovacuum.After(t.lastVacuum) {
		return t.lastAutovacuum
	}
	return t.lastVacuum
}

func (t *tableFacts) lastAnalyzed() time.Time {
	if t.lastAutoanalyze.After(t.lastAnalyze) {
		return t.lastAutoanalyze
	}
	return t.lastAnalyze
}

// facts reads (once) the outbox table's facts; a missing table is a skip:
// the migrations check reports it.
func (d *doctor) facts(ctx context.Context) (*tableFacts, error) {
	if d.table != nil {
		return d.table, nil
	}
	var (
		t                tableFacts
		opts             []string
		lv, lav, la, laa pgtype.Timestamptz
		found            bool
	)
	rows, err := d.db.Query(ctx, `SELECT c.relpages::int8, c.reltuples::float8, pg_relation_size(c.oid), pg_total_relation_size(c.oid),
	COALESCE(c.reloptions, '{}'::text[]),
	COALESCE(s.n_live_tup, 0), COALESCE(s.n_dead_tup, 0), COALESCE(s.n_mod_since_analyze, 0),
	s.last_vacuum, s.last_autovacuum, s.last_analyze, s.last_autoanalyze, now(), c.relkind = 'p'
FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid
WHERE c.oid = to_regclass($1)`, d.n.outbox)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		found = true
		if err := rows.Scan(&t.pages, &t.tuples, &t.size, &t.total, &opts, &t.live, &t.dead, &t.modSinceAnalyze,
			&lv, &lav, &la, &laa, &t.now, &t.partitioned); err != nil {
			rows.Close()
			return nil, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, &skipError{reason: "the outbox table " + d.n.outbox + " does not exist (see the migrations check)"}
	}
	t.lastVacuum, t.lastAutovacuum, t.lastAnalyze, t.lastAutoanalyze = finiteTime(lv), finiteTime(lav), finiteTime(la), finiteTime(laa)
	t.options = make(map[string]string, len(opts))
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		t.options[strings.ToLower(k)] = v
	}
	d.table = &t
	return &t, nil
}

// errPartitionedReason skips a check that reads the table's own
// statistics, which a partitioned outbox keeps per partition.
const errPartitionedReason = "the outbox table is partitioned (MigrateConfig.Partitions): this check reads a plain table's statistics and does not look at its partitions yet"

// tableObject names the outbox table in findings.
func (d *doctor) tableObject() string { return "table " + d.n.schema + "." + d.n.table }

// --- migrations

func (d *doctor) checkMigrations(ctx context.Context) ([]Finding, error) {
	want, err := latestMigration()
	if err != nil {
		return nil, err
	}
	fix := fmt.Sprintf("run `outboxctl migrate --schema %s --table %s` (or postgres.Migrate) with this build", d.n.schema, d.n.table)
	var outbox, versions bool
	if err := d.db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL", d.n.outbox, d.n.versions).
		Scan(&outbox, &versions); err != nil {
		return nil, err
	}
	if !outbox || !versions {
		return []Finding{{Severity: SeverityCritical, Object: d.tableObject(),
			Summary: fmt.Sprintf("the outbox table %s.%s (or its migrations table) does not exist: nothing can be written or relayed", d.n.schema, d.n.table),
			Fix:     fix}}, nil
	}
	rows, err := d.db.Query(ctx, "SELECT version FROM "+d.n.versions+" WHERE target = $1", d.n.table)
	if err != nil {
		return nil, err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, err
	}
	have := contiguous(applied)
	var out []Finding
	if have < want {
		var missing []string
		for v := 1; v <= want; v++ {
			if !slices.Contains(applied, v) {
				missing = append(missing, strconv.Itoa(v))
			}
		}
		out = append(out, Finding{Severity: SeverityCritical, Object: d.tableObject(), Count: int64(len(missing)),
			Summary: fmt.Sprintf("the outbox is at migration version %d, this build needs %d (missing: %s): relays refuse to start", have, want, strings.Join(missing, ", ")),
			Fix:     fix})
	}
	if newest := slices.Max(append(applied, 0)); newest > want {
		out = append(out, Finding{Severity: SeverityInfo, Object: d.tableObject(),
			Summary: fmt.Sprintf("the schema has migration %d, newer than this build knows (%d): a newer outboxkit migrated it", newest, want),
			Fix:     "nothing, during a rolling deploy; otherwise upgrade this program to the outboxkit version that migrated the schema"})
	}
	return out, nil
}

// --- indexes

// wantIndex is an index the outbox needs.
type wantIndex struct {
	name     string // unquoted; "" for a primary key
	table    string // qualified, quoted
	primary  bool
	severity Severity
	why      string
	create   string // the statement that makes it
}

// migrationIndexRE finds a migration's CREATE INDEX statements.
var migrationIndexRE = regexp.MustCompile(`(?s)CREATE INDEX IF NOT EXISTS ("[^"]+") ON [^;]+;`)

// createStatements maps each index the migrations create (quoted name) to
// the statement that builds it without blocking writers.
func (d *doctor) createStatements() map[string]string {
	out := map[string]string{}
	ms, err := renderMigrations(d.n)
	if err != nil {
		return out
	}
	for _, m := range ms {
		for _, sm := range migrationIndexRE.FindAllStringSubmatch(m.Up, -1) {
			stmt := strings.Join(strings.Fields(sm[0]), " ")
			out[sm[1]] = strings.Replace(stmt, "CREATE INDEX IF NOT EXISTS", "CREATE INDEX CONCURRENTLY IF NOT EXISTS", 1)
		}
	}
	return out
}

func (d *doctor) checkIndexes(ctx context.Context) ([]Finding, error) {
	var outboxOK, processedOK, partitioned bool
	if err := d.db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
	COALESCE((SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = to_regclass($1)), false)`, d.n.outbox, d.n.processed).
		Scan(&outboxOK, &processedOK, &partitioned); err != nil {
		return nil, err
	}
	if !outboxOK {
		return nil, &skipError{reason: "the outbox table " + d.n.outbox + " does not exist (see the migrations check)"}
	}
	type have struct {
		valid, ready, primary, onOutbox bool
		firstCol                        string
	}
	rows, err := d.db.Query(ctx, `SELECT ic.relname::text, i.indisvalid, i.indisready, i.indisprimary, i.indrelid = to_regclass($1),
	COALESCE((SELECT a.attname::text FROM pg_catalog.pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[0]), '')
FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1) OR i.indrelid = to_regclass($2)`, d.n.outbox, d.n.processed)
	if err != nil {
		return nil, err
	}
	idx := map[string]have{}
	var primaryOutbox, primaryProcessed *have
	for rows.Next() {
		var name string
		var h have
		if err := rows.Scan(&name, &h.valid, &h.ready, &h.primary, &h.onOutbox, &h.firstCol); err != nil {
			rows.Close()
			return nil, err
		}
		idx[name] = h
		if h.primary {
			hh := h
			if h.onOutbox {
				primaryOutbox = &hh
			} else {
				primaryProcessed = &hh
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	t := d.n.table
	create := d.createStatements()
	q := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	aggSeverity, aggWhy := SeverityInfo, "with ordering (which these relays do not use) a claim finds an aggregate's pending predecessor through it"
	if d.cfg.Ordering {
		aggSeverity, aggWhy = SeverityCritical, "with ordering on, every claim looks for each candidate's pending predecessor through it; without it each claim scans the table"
	}
	wants := []wantIndex{
		{table: d.n.outbox, primary: true, severity: SeverityCritical, why: "events are settled, replayed and looked up by ID through it, and it keeps IDs unique",
			create: "ALTER TABLE " + d.n.outbox + " ADD PRIMARY KEY (id)"},
		{name: t + "_pending_idx", table: d.n.outbox, severity: SeverityCritical, why: "every claim walks it; without it each claim scans the whole table"},
		{name: t + "_slot_idx", table: d.n.outbox, severity: SeverityWarning, why: "claims under a backlog go by slot through it; without it they filter the pending index and relays sharing the table meet again"},
		{name: t + "_published_idx", table: d.n.outbox, severity: SeverityWarning, why: "retention deletes published events, and reconcile reads them, through it; without it each prune scans the table"},
		{name: t + "_dead_idx", table: d.n.outbox, severity: SeverityWarning, why: "status, the dead-letter metrics and dlq list read dead letters through it; without it each of them scans the table"},
		{name: t + "_aggregate_idx", table: d.n.outbox, severity: aggSeverity, why: aggWhy},
	}
	if processedOK {
		wants = append(wants,
			wantIndex{table: d.n.processed, primary: true, severity: SeverityCritical,
				why:    "the Deduper's INSERT ... ON CONFLICT DO NOTHING relies on it: without it a redelivery is recorded again and its effect applied twice",
				create: "ALTER TABLE " + d.n.processed + " ADD PRIMARY KEY (consumer, event_id)"},
			wantIndex{name: t + "_processed_at_idx", table: d.n.processed, severity: SeverityWarning,
				why: "retention prunes processed records, and reconcile reads them, through it; without it each prune scans the table"})
	}
	var out []Finding
	if partitioned {
		// The partitioned layout keys each partition on id (a primary key
		// on the parent would have to hold created_at): look for the
		// partitions without one.
		wants = wants[1:]
		rows, err := d.db.Query(ctx, `SELECT c.relname::text FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1)
	AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index x WHERE x.indrelid = c.oid AND x.indisprimary AND x.indisvalid)
ORDER BY 1`, d.n.outbox)
		if err != nil {
			return nil, err
		}
		missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		for _, part := range missing {
			object := "primary key of partition " + d.n.schema + "." + part
			out = append(out, Finding{Severity: SeverityCritical, Object: object,
				Summary: object + " is missing: events in it are settled, replayed and looked up by ID through it, and it keeps their IDs unique",
				Fix:     "ALTER TABLE " + q(d.n.schema) + "." + q(part) + " ADD PRIMARY KEY (id)"})
		}
	}
	for _, w := range wants {
		var h *have
		object := "primary key of " + strings.ReplaceAll(w.table, `"`, "")
		if w.primary {
			if w.table == d.n.outbox {
				h = primaryOutbox
			} else {
				h = primaryProcessed
			}
		} else {
			object = "index " + d.n.schema + "." + w.name
			if x, ok := idx[w.name]; ok {
				h = &x
			}
			if w.create == "" {
				w.create = create[q(w.name)]
			}
		}
		switch {
		case h == nil:
			fix := "recreate it without blocking writers: " + w.create
			if w.create == "" {
				fix = "recreate it as the migrations define it (outboxctl migrate --print shows the statement)"
			}
			out = append(out, Finding{Severity: w.severity, Object: object,
				Summary: object + " is missing: " + w.why, Fix: fix})
		case !h.valid || !h.ready:
			out = append(out, Finding{Severity: w.severity, Object: object,
				Summary: object + " is invalid (a CREATE INDEX CONCURRENTLY or REINDEX that failed): the planner does not use it, but writes still maintain it; " + w.why,
				Fix:     "rebuild it: REINDEX INDEX CONCURRENTLY " + q(d.n.schema) + "." + q(w.name)})
		}
	}
	if d.cfg.Destinations {
		led := false
		for _, h := range idx {
			led = led || h.onOutbox && h.valid && h.firstCol == "destination"
		}
		if !led {
			out = append(out, Finding{Severity: SeverityWarning, Object: d.tableObject(),
				Summary: "relays claim by destination, and no index is led by the destination column: each such claim walks every pending event of the other destinations",
				Fix: "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + q(t+"_destination_idx") + " ON " + d.n.outbox +
					" (destination, available_at, pos) WHERE published_at IS NULL AND dead_at IS NULL"})
		}
	}
	return out, nil
}

// --- sessions

// session is a row of pg_stat_activity as the checks read it.
type session struct {
	pid               int
	user, app, client string
	state             string
	xactAge, stateAge float64 // seconds
	xidAge            int64
	query             string
}

func (s session) describe() string {
	parts := []string{"pid " + strconv.Itoa(s.pid)}
	if s.user != "" {
		parts = append(parts, "user "+s.user)
	}
	if s.app != "" {
		parts = append(parts, "application "+strconv.Quote(s.app))
	}
	if s.client != "" {
		parts = append(parts, "client "+s.client)
	}
	if s.state != "" {
		parts = append(parts, s.state)
	}
	d := strings.Join(parts, ", ")
	if s.query != "" {
		d += ", last statement " + strconv.Quote(s.query)
	}
	return d
}

const sessionColumns = `pid, COALESCE(usename::text, ''), COALESCE(application_name, ''), COALESCE(host(client_addr), ''), COALESCE(state, ''),
	COALESCE(extract(epoch FROM now() - xact_start), 0)::float8, COALESCE(extract(epoch FROM now() - state_change), 0)::float8,
	greatest(COALESCE(age(backend_xmin), 0), COALESCE(age(backend_xid), 0))::int8,
	left(regexp_replace(COALESCE(query, ''), '\s+', ' ', 'g'), 120)`

func (d *doctor) sessions(ctx context.Context, where string, args ...any) ([]session, error) {
	rows, err := d.db.Query(ctx, `SELECT `+sessionColumns+` FROM pg_catalog.pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND `+where+`
ORDER BY xact_start NULLS LAST, pid`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []session
	for rows.Next() {
		var s session
		if err := rows.Scan(&s.pid, &s.user, &s.app, &s.client, &s.state, &s.xactAge, &s.stateAge, &s.xidAge, &s.query); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func (d *doctor) checkXminHorizon(ctx context.Context) ([]Finding, error) {
	var out []Finding
	long := d.cfg.LongTransaction
	ss, err := d.sessions(ctx, `backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')
	AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
	AND xact_start < now() - $1::int8 * interval '1 microsecond'`, us(long))
	if err != nil {
		return nil, err
	}
	for _, s := range ss {
		age := seconds(s.xactAge)
		sev := SeverityWarning
		if age >= 6*long {
			sev = SeverityCritical
		}
		out = append(out, Finding{Severity: sev, Object: "pid " + strconv.Itoa(s.pid), PID: s.pid, Age: age, Count: s.xidAge,
			Summary: fmt.Sprintf("a transaction open for %s (%s) holds back the xmin horizon by %d transactions: VACUUM cannot remove the row versions of events settled since it began, so the outbox and its pending index grow",
				formatAge(age), s.describe(), s.xidAge),
			Fix: fmt.Sprintf("end it: commit or roll back in its application, or SELECT pg_terminate_backend(%d); keep transactions short (statement_timeout, idle_in_transaction_session_timeout)", s.pid)})
	}

	rows, err := d.db.Query(ctx, `SELECT gid, COALESCE(owner::text, ''), extract(epoch FROM now() - prepared)::float8, age(transaction)::int8
FROM pg_catalog.pg_prepared_xacts
WHERE database = current_database() AND prepared < now() - $1::int8 * interval '1 microsecond'
ORDER BY prepared`, us(long))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var gid, owner string
		var ageS float64
		var xids int64
		if err := rows.Scan(&gid, &owner, &ageS, &xids); err != nil {
			rows.Close()
			return nil, err
		}
		age := seconds(ageS)
		out = append(out, Finding{Severity: SeverityCritical, Object: "prepared transaction " + strconv.Quote(gid), Age: age, Count: xids,
			Summary: fmt.Sprintf("a prepared transaction %q (owner %s) has waited %s for its COMMIT PREPARED and holds back the xmin horizon by %d transactions; it survives restarts",
				gid, owner, formatAge(age), xids),
			Fix: fmt.Sprintf("let its transaction manager finish it, or by hand: COMMIT PREPARED %s; or ROLLBACK PREPARED %s;", quoteLiteral(gid), quoteLiteral(gid))})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// Only a slot's xmin (a physical slot's standby feedback) holds back
	// vacuum of ordinary tables; a logical slot's catalog_xmin holds back
	// the catalogs only (the replication-slots check reports it).
	rows, err = d.db.Query(ctx, `SELECT slot_name::text, active, COALESCE(active_pid, 0), age(xmin)::int8
FROM pg_catalog.pg_replication_slots
WHERE xmin IS NOT NULL AND (NOT active OR age(xmin) > $1::int8)
ORDER BY age(xmin) DESC`, d.cfg.SlotXminAge)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name string
		var active bool
		var pid int
		var xids int64
		if err := rows.Scan(&name, &active, &pid, &xids); err != nil {
			rows.Close()
			return nil, err
		}
		state := "inactive"
		if active {
			state = "active, pid " + strconv.Itoa(pid)
		}
		out = append(out, Finding{Severity: SeverityWarning, Object: "slot " + name, PID: pid, Count: xids,
			Summary: fmt.Sprintf("replication slot %s (%s) holds back the xmin horizon by %d transactions: the standby behind it sends feedback for a long query, or nothing has used the slot since", name, state, xids),
			Fix:     fmt.Sprintf("end the standby's long query (or turn off its hot_standby_feedback); if no standby uses the slot: SELECT pg_drop_replication_slot(%s)", quoteLiteral(name))})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = d.db.Query(ctx, `SELECT pid, COALESCE(application_name, ''), COALESCE(host(client_addr), ''), age(backend_xmin)::int8
FROM pg_catalog.pg_stat_replication
WHERE backend_xmin IS NOT NULL AND age(backend_xmin) > $1::int8`, d.cfg.SlotXminAge)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var app, client string
		var xids int64
		if err := rows.Scan(&pid, &app, &client, &xids); err != nil {
			return nil, err
		}
		out = append(out, Finding{Severity: SeverityWarning, Object: "pid " + strconv.Itoa(pid), PID: pid, Count: xids,
			Summary: fmt.Sprintf("standby %q (%s, WAL sender pid %d) holds back the xmin horizon by %d transactions through hot_standby_feedback: a long query runs on it", app, client, pid, xids),
			Fix:     "end the long query on the standby, or bound it there (statement_timeout; max_standby_streaming_delay with hot_standby_feedback off)"})
	}
	return out, rows.Err()
}

func (d *doctor) checkIdleInTransaction(ctx context.Context) ([]Finding, error) {
	var timeout string
	if err := d.db.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&timeout); err != nil {
		return nil, err
	}
	ss, err := d.sessions(ctx, `state IN ('idle in transaction', 'idle in transaction (aborted)')
	AND state_change < now() - $1::int8 * interval '1 microsecond'`, us(d.cfg.IdleInTransaction))
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, s := range ss {
		idle := seconds(s.stateAge)
		fix := fmt.Sprintf("find the code path that leaves a transaction open (a missing commit or rollback, a network call inside a transaction); to end this one: SELECT pg_terminate_backend(%d)", s.pid)
		if timeout == "0" {
			fix += "; and set idle_in_transaction_session_timeout (e.g. ALTER ROLE ... SET idle_in_transaction_session_timeout = '1min') so such sessions end by themselves"
		}
		out = append(out, Finding{Severity: SeverityWarning, Object: "pid " + strconv.Itoa(s.pid), PID: s.pid, Age: idle,
			Summary: fmt.Sprintf("a session has been idle in a transaction for %s (%s, transaction open for %s): it holds its locks and connection, and its snapshot or transaction ID holds back vacuum",
				formatAge(idle), s.describe(), formatAge(seconds(s.xactAge))),
			Fix: fix})
	}
	return out, nil
}

// --- replication slots

func (d *doctor) checkReplicationSlots(ctx context.Context) ([]Finding, error) {
	rows, err := d.db.Query(ctx, `SELECT slot_name::text, slot_type, COALESCE(database::text, ''), active, COALESCE(active_pid, 0), temporary,
	COALESCE(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_insert_lsn() END, restart_lsn), 0)::int8,
	COALESCE(wal_status, ''), COALESCE(age(xmin), 0)::int8, COALESCE(age(catalog_xmin), 0)::int8
FROM pg_catalog.pg_replication_slots
ORDER BY slot_name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Finding
	for rows.Next() {
		var (
			name, typ, db, walStatus string
			active, temporary        bool
			pid                      int
			retained, xmin, catXmin  int64
		)
		if err := rows.Scan(&name, &typ, &db, &active, &pid, &temporary, &retained, &walStatus, &xmin, &catXmin); err != nil {
			return nil, err
		}
		object := "slot " + name
		kind := typ
		if db != "" {
			kind += ", database " + db
		}
		holds := ""
		if xmin > 0 {
			holds += fmt.Sprintf(", holds xmin %d transactions old (vacuum of every table)", xmin)
		}
		if catXmin > 0 {
			holds += fmt.Sprintf(", holds catalog_xmin %d transactions old (vacuum of the catalogs)", catXmin)
		}
		drop := fmt.Sprintf("SELECT pg_drop_replication_slot(%s)", quoteLiteral(name))
		switch {
		case walStatus == "lost":
			out = append(out, Finding{Severity: SeverityCritical, Object: object, Bytes: retained,
				Summary: fmt.Sprintf("replication slot %s (%s) has lost WAL it needed: its consumer can never resume from it", name, kind),
				Fix:     "drop it and rebuild its consumer (a new subscription or standby): " + drop})
		case !active:
			sev := SeverityWarning
			if retained > d.cfg.SlotRetainedWAL || walStatus == "unreserved" {
				sev = SeverityCritical
			}
			out = append(out, Finding{Severity: sev, Object: object, Bytes: retained, Count: max(xmin, catXmin),
				Summary: fmt.Sprintf("replication slot %s (%s) is inactive and retains %s of WAL%s: nothing consumes it, and what it holds grows with every write (the outbox's included) until the disk fills",
					name, kind, formatBytes(retained), holds),
				Fix: "restart its consumer if one should be there; otherwise drop it: " + drop + "; and bound what any slot may keep with max_slot_wal_keep_size"})
		case retained > d.cfg.SlotRetainedWAL:
			out = append(out, Finding{Severity: SeverityWarning, Object: object, PID: pid, Bytes: retained,
				Summary: fmt.Sprintf("replication slot %s (%s, active, pid %d) retains %s of WAL: its consumer is far behind", name, kind, pid, formatBytes(retained)),
				Fix:     "find why its consumer lags (a slow subscriber or standby, a network limit); bound what a slot may keep with max_slot_wal_keep_size"})
		}
	}
	return out, rows.Err()
}

// --- vacuum

// autovacuumSettings are the server's autovacuum settings.
type autovacuumSettings struct {
	on, trackCounts bool
	threshold       float64
	scale           float64
	naptime         time.Duration
}

func (d *doctor) autovacuumSettings(ctx context.Context) (autovacuumSettings, error) {
	var s autovacuumSettings
	var on, track string
	var naptimeS float64
	err := d.db.QueryRow(ctx, `SELECT current_setting('autovacuum'), current_setting('track_counts'),
	current_setting('autovacuum_vacuum_threshold')::float8, current_setting('autovacuum_vacuum_scale_factor')::float8,
	(SELECT setting::float8 FROM pg_catalog.pg_settings WHERE name = 'autovacuum_naptime')`).
		Scan(&on, &track, &s.threshold, &s.scale, &naptimeS)
	s.on, s.trackCounts = on == "on", track == "on"
	s.naptime = seconds(naptimeS)
	return s, err
}

// reloptionOff reports whether a boolean storage parameter is off.
func reloptionOff(v string) bool {
	switch strings.ToLower(v) {
	case "false", "off", "no", "0", "f", "n":
		return true
	}
	return false
}

// vacuumThreshold is the number of dead row versions beyond which
// autovacuum vacuums the table.
func (t *tableFacts) vacuumThreshold(s autovacuumSettings) float64 {
	threshold, scale := s.threshold, s.scale
	if v, err := strconv.ParseFloat(t.options["autovacuum_vacuum_threshold"], 64); err == nil {
		threshold = v
	}
	if v, err := strconv.ParseFloat(t.options["autovacuum_vacuum_scale_factor"], 64); err == nil {
		scale = v
	}
	tuples := t.tuples
	if tuples < 0 {
		tuples = float64(t.live)
	}
	return threshold + scale*tuples
}

func (t *tableFacts) vacuumedText() string {
	last := t.lastVacuumed()
	if last.IsZero() {
		return "never vacuumed"
	}
	return "last vacuumed " + formatAge(t.now.Sub(last)) + " ago"
}

func (d *doctor) checkAutovacuum(ctx context.Context) ([]Finding, error) {
	s, err := d.autovacuumSettings(ctx)
	if err != nil {
		return nil, err
	}
	t, err := d.facts(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	state := fmt.Sprintf("%d dead row versions, %s", t.dead, t.vacuumedText())
	if !s.on {
		out = append(out, Finding{Severity: SeverityWarning, Object: "server", Count: t.dead,
			Summary: "autovacuum is off for the whole server: nothing vacuums or analyzes the outbox unless someone runs VACUUM (the outbox table: " + state + ")",
			Fix:     "turn it on: ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf(); (or schedule VACUUM (ANALYZE) of the outbox tables, every few minutes under load)"})
	}
	if !s.trackCounts {
		out = append(out, Finding{Severity: SeverityWarning, Object: "server",
			Summary: "track_counts is off: autovacuum cannot tell which tables need vacuuming, and the statistics this report reads are empty",
			Fix:     "ALTER SYSTEM SET track_counts = on; SELECT pg_reload_conf();"})
	}
	if t.partitioned {
		// Autovacuum takes the partitions, not their parent.
		return out, nil
	}
	tableOff := reloptionOff(t.options["autovacuum_enabled"])
	if tableOff {
		out = append(out, Finding{Severity: SeverityWarning, Object: d.tableObject(), Count: t.dead,
			Summary: fmt.Sprintf("autovacuum is disabled on the outbox table (autovacuum_enabled = %s): %s", t.options["autovacuum_enabled"], state),
			Fix:     "ALTER TABLE " + d.n.outbox + " RESET (autovacuum_enabled);"})
	}
	if !s.on || !s.trackCounts || tableOff {
		return out, nil
	}
	threshold := t.vacuumThreshold(s)
	if float64(t.dead) <= threshold {
		return out, nil
	}
	// Autovacuum should have taken the table: either it has not come
	// (workers busy elsewhere, or it just crossed the threshold), or it
	// came and could not remove the dead versions.
	last := t.lastVacuumed()
	recent := max(10*s.naptime, 10*time.Minute)
	switch {
	case !last.IsZero() && t.now.Sub(last) < recent:
		// Vacuum ran lately. The dead versions it left are held back only
		// if something older than that vacuum holds the horizon; without
		// such a holder they are younger than it, or counts that backends
		// report up to ten seconds late, and the next autovacuum takes
		// them.
		held, err := d.horizonHeldSince(ctx, last)
		if err != nil {
			return nil, err
		}
		if !held {
			return out, nil
		}
		out = append(out, Finding{Severity: SeverityWarning, Object: d.tableObject(), Count: t.dead,
			Summary: fmt.Sprintf("vacuum ran on the outbox table %s ago and left %d dead row versions (autovacuum's threshold: %.0f): something holds back the xmin horizon, so they cannot be removed yet",
				formatAge(t.now.Sub(last)), t.dead, threshold),
			Fix: "end what holds back the horizon (see the xmin-horizon and idle-in-transaction findings); the next autovacuum then removes them"})
	case last.IsZero() || t.now.Sub(last) >= recent:
		out = append(out, Finding{Severity: SeverityWarning, Object: d.tableObject(), Count: t.dead,
			Summary: fmt.Sprintf("autovacuum is not reaching the outbox table: %d dead row versions, over its threshold of %.0f, and %s",
				t.dead, threshold, t.vacuumedText()),
			Fix: "check that autovacuum workers are not all busy on large tables (pg_stat_progress_vacuum; raise autovacuum_max_workers or lower autovacuum_vacuum_cost_delay), and VACUUM (ANALYZE) " + d.n.outbox + " now"})
	}
	return out, nil
}

// horizonHeldSince reports whether a session, a prepared transaction or a
// replication slot of this database has held the xmin horizon since
// before t.
func (d *doctor) horizonHeldSince(ctx context.Context, t time.Time) (bool, error) {
	var held bool
	err := d.db.QueryRow(ctx, `SELECT EXISTS (
	SELECT 1 FROM pg_catalog.pg_stat_activity
	WHERE datname = current_database() AND pid <> pg_backend_pid()
		AND backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')
		AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND xact_start < $1::timestamptz
) OR EXISTS (
	SELECT 1 FROM pg_catalog.pg_prepared_xacts WHERE database = current_database() AND prepared < $1::timestamptz
) OR EXISTS (
	SELECT 1 FROM pg_catalog.pg_replication_slots WHERE xmin IS NOT NULL
) OR EXISTS (
	SELECT 1 FROM pg_catalog.pg_stat_replication WHERE backend_xmin IS NOT NULL
)`, t).Scan(&held)
	return held, err
}

func (d *doctor) checkTableBloat(ctx context.Context) ([]Finding, error) {
	t, err := d.facts(ctx)
	if err != nil {
		return nil, err
	}
	if t.partitioned {
		return nil, &skipError{reason: errPartitionedReason}
	}
	if t.dead < 1000 || float64(t.dead) < 0.2*float64(t.live) {
		return nil, nil
	}
	pct := 100 * float64(t.dead) / float64(t.dead+t.live)
	return []Finding{{Severity: SeverityWarning, Object: d.tableObject(), Count: t.dead, Bytes: t.total,
		Summary: fmt.Sprintf("the outbox table holds %d dead row versions beside %d live rows (%.0f%% dead; %s with its indexes; %s): claims, settlements and the pending index step over them",
			t.dead, t.live, pct, formatBytes(t.total), t.vacuumedText()),
		Fix: "VACUUM (ANALYZE) " + d.n.outbox + "; if VACUUM VERBOSE says dead row versions cannot be removed yet, end what holds back the xmin horizon first; then keep autovacuum reaching the table (see the autovacuum findings)"}}, nil
}

// --- the pending index and plans

// explainNode is a plan node of EXPLAIN (FORMAT JSON).
type explainNode struct {
	NodeType     string        `json:"Node Type"`
	RelationName string        `json:"Relation Name"`
	Schema       string        `json:"Schema"`
	IndexName    string        `json:"Index Name"`
	SharedHit    int64         `json:"Shared Hit Blocks"`
	SharedRead   int64         `json:"Shared Read Blocks"`
	Plans        []explainNode `json:"Plans"`
}

func (n *explainNode) walk(f func(*explainNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

func parsePlan(raw []byte) (*explainNode, error) {
	var root []struct {
		Plan explainNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("read EXPLAIN output: %w", err)
	}
	if len(root) == 0 {
		return nil, fmt.Errorf("read EXPLAIN output: no plan")
	}
	return &root[0].Plan, nil
}

// inRolledBackTx runs fn in a transaction that is always rolled back.
func (d *doctor) inRolledBackTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := d.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(tx)
}

// pendingHeadBuffers is how many buffers (index and table pages, counted
// at each access) a search from the head of the pending index may read
// before its dead entries are worth a finding. A clean index needs about
// four: its root, a leaf and the row. Each dead entry costs a visit to
// its row's page until a scan marks it dead, and a leaf page per few
// hundred entries after that: 512 is some thousands of settled events
// VACUUM has not cleaned up, about a millisecond at every floor search.
const pendingHeadBuffers = 512

func (d *doctor) checkPendingIndex(ctx context.Context) ([]Finding, error) {
	idxName := d.n.table + "_pending_idx"
	var exists bool
	if err := d.db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", d.n.schemaQ+"."+d.n.pendingIdx).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, &skipError{reason: "the pending index " + d.n.schema + "." + idxName + " does not exist (see the indexes check)"}
	}
	if t, err := d.facts(ctx); err != nil {
		return nil, err
	} else if t.partitioned {
		return nil, &skipError{reason: errPartitionedReason}
	}
	var plan []byte
	var size int64
	err := d.inRolledBackTx(ctx, func(tx pgx.Tx) error {
		// The search every relay runs from the beginning of the pending
		// set (claimfloor.go): it walks the index from its head, over the
		// entries of settled events VACUUM has not removed yet.
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '30s'; SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off"); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) SELECT p.available_at, p.pos FROM `+d.n.outbox+` p
WHERE p.published_at IS NULL AND p.dead_at IS NULL ORDER BY p.available_at, p.pos LIMIT 1`).Scan(&plan); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pg_relation_size(to_regclass($1))", d.n.schemaQ+"."+d.n.pendingIdx).Scan(&size)
	})
	if err != nil {
		return nil, err
	}
	root, err := parsePlan(plan)
	if err != nil {
		return nil, err
	}
	var buffers int64
	used := false
	root.walk(func(n *explainNode) {
		if n.IndexName == idxName {
			used = true
			buffers = max(buffers, n.SharedHit+n.SharedRead)
		}
	})
	if !used {
		return nil, &skipError{reason: "the planner would not walk " + idxName + " for the floor search (is it valid?)"}
	}
	if buffers <= pendingHeadBuffers {
		return nil, nil
	}
	object := "index " + d.n.schema + "." + idxName
	return []Finding{{Severity: SeverityWarning, Object: object, Count: buffers, Bytes: size,
		Summary: fmt.Sprintf("finding the oldest pending event from the head of %s reads %d buffers (index and table pages; the index is %s, a clean one needs about 4): its head holds entries of settled events that VACUUM has not removed, which relays step over at start, every 5 s when they look for the claim floor, and when they give back a cut-off claim",
			object, buffers, formatBytes(size)),
		Fix: "VACUUM " + d.n.outbox + " (and keep autovacuum reaching it, with nothing holding back the xmin horizon); if the index stays large once vacuumed: REINDEX INDEX CONCURRENTLY " + d.n.schemaQ + "." + d.n.pendingIdx}}, nil
}

// claimStatement is a claim the relays run, for the generic-plan check.
type claimStatement struct {
	name, sql, types, nulls string
}

func (d *doctor) claimStatements() []claimStatement {
	const types = "timestamptz, bigint, uuid, interval, timestamptz, bigint"
	const nulls = "NULL, NULL, NULL, NULL, NULL, NULL"
	out := []claimStatement{{name: "claim", sql: claimSQL(d.n, d.cfg.Ordering, false), types: types, nulls: nulls}}
	if !d.cfg.Ordering {
		out = append(out, claimStatement{name: "slot claim", sql: claimSlotSQL(d.n), types: types, nulls: nulls})
	}
	if d.cfg.Destinations {
		out = append(out, claimStatement{name: "claim by destination", sql: claimSQL(d.n, d.cfg.Ordering, true), types: types + ", text", nulls: nulls + ", NULL"})
	}
	return out
}

func (d *doctor) checkGenericPlan(ctx context.Context) ([]Finding, error) {
	t, err := d.facts(ctx)
	if err != nil {
		return nil, err
	}
	if t.partitioned {
		// Its relays claim with other statements, by partition.
		return nil, &skipError{reason: errPartitionedReason}
	}
	if t.size < smallTablePages*8192 {
		// A scan of a table this small costs no more than an index; the
		// plan that matters is the one made once it has grown.
		return nil, nil
	}
	var out []Finding
	for i, c := range d.claimStatements() {
		name := "outboxkit_doctor_claim_" + strconv.Itoa(i)
		var plan []byte
		err := d.inRolledBackTx(ctx, func(tx pgx.Tx) error {
			// PREPARE is not transactional: the statement is deallocated
			// before the transaction ends, from a savepoint's failure too.
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan; PREPARE "+name+"("+c.types+") AS "+c.sql); err != nil {
				return err
			}
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			explainErr := sp.QueryRow(ctx, "EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE "+name+"("+c.nulls+")").Scan(&plan)
			if explainErr != nil {
				_ = sp.Rollback(ctx)
			} else if err := sp.Commit(ctx); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "DEALLOCATE "+name); err != nil {
				return err
			}
			return explainErr
		})
		if err != nil {
			return nil, err
		}
		root, err := parsePlan(plan)
		if err != nil {
			return nil, err
		}
		scans := false
		root.walk(func(n *explainNode) {
			scans = scans || n.NodeType == "Seq Scan" && n.RelationName == d.n.table && (n.Schema == "" || n.Schema == d.n.schema)
		})
		if !scans {
			continue
		}
		sev := SeverityWarning
		if t.size >= 128<<20 {
			sev = SeverityCritical
		}
		out = append(out, Finding{Severity: sev, Object: d.tableObject(), Bytes: t.size,
			Summary: fmt.Sprintf("the generic plan of the relays' %s scans the whole outbox table (%s): a relay whose connection keeps this plan (pgx prepares statements; PostgreSQL switches to the generic plan after five executions) reads every row the table keeps on each claim",
				c.name, formatBytes(t.size)),
			Fix: "create the index it lacks (see the indexes findings), or, if none is missing, refresh the statistics: ANALYZE " + d.n.outbox + "; which also makes every connection plan the statement again"})
	}
	return out, nil
}

func (d *doctor) checkStatistics(ctx context.Context) ([]Finding, error) {
	t, err := d.facts(ctx)
	if err != nil {
		return nil, err
	}
	if t.partitioned {
		return nil, &skipError{reason: errPartitionedReason}
	}
	if t.size < smallTablePages*8192 {
		return nil, nil
	}
	fix := "ANALYZE " + d.n.outbox + " (it also makes every connection plan its prepared statements again); keep autovacuum on for the table so its ANALYZE follows the growth"
	switch {
	case t.lastAnalyzed().IsZero() && t.tuples < 0:
		return []Finding{{Severity: SeverityWarning, Object: d.tableObject(), Bytes: t.size,
			Summary: fmt.Sprintf("the outbox table (%s) has never been analyzed: the planner guesses its contents, and generic plans made on a guess may scan it", formatBytes(t.size)),
			Fix:     fix}}, nil
	case t.tuples >= 0 && float64(t.live) > 10*max(t.tuples, 100):
		return []Finding{{Severity: SeverityWarning, Object: d.tableObject(), Count: t.live,
			Summary: fmt.Sprintf("the planner's statistics describe %.0f rows, the table holds about %d: plans made on them treat the outbox as small (last analyzed %s)",
				t.tuples, t.live, analyzedAgo(t)),
			Fix: fix}}, nil
	}
	return nil, nil
}

func analyzedAgo(t *tableFacts) string {
	last := t.lastAnalyzed()
	if last.IsZero() {
		return "never"
	}
	return formatAge(t.now.Sub(last)) + " ago"
}

// --- clocks

func (d *doctor) checkClockSkew(ctx context.Context) ([]Finding, error) {
	// The best of three round trips: the shortest bounds the error best.
	var (
		best   time.Duration = -1
		skew   time.Duration
		dbTime time.Time
	)
	for range 3 {
		t0 := d.cfg.Now()
		if err := d.db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbTime); err != nil {
			return nil, err
		}
		t1 := d.cfg.Now()
		rtt := t1.Sub(t0)
		if best < 0 || rtt < best {
			best = rtt
			skew = dbTime.Sub(t0.Add(rtt / 2))
		}
	}
	abs := skew
	if abs < 0 {
		abs = -abs
	}
	if abs <= d.cfg.MaxClockSkew+best/2 {
		return nil, nil
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "this host"
	}
	dir := "ahead of"
	if skew < 0 {
		dir = "behind"
	}
	sev := SeverityWarning
	if abs >= time.Minute {
		sev = SeverityCritical
	}
	return []Finding{{Severity: sev, Object: "host " + host, Age: abs,
		Summary: fmt.Sprintf("the database's clock is %s %s this host's (measured over a %s round trip): leases and retries run on the database's clock, but delays, QStash's Not-Before and token expiry computed here are off by as much",
			formatAge(abs), dir, best.Round(time.Microsecond)),
		Fix: "synchronise both clocks with NTP (chrony, systemd-timesyncd) and check that the host's time zone database is current"}}, nil
}

// --- formatting

// formatBytes prints n in binary units.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// formatAge prints a duration rounded to what matters at its scale.
func formatAge(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.1fd", d.Hours()/24)
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}
