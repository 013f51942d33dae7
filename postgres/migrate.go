package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// migrationFiles holds the versioned migration templates. They reference
// names only through template fields that hold already validated and quoted
// identifiers, so no configuration value reaches SQL text unquoted.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned schema change, rendered for a schema and table.
type Migration struct {
	// Version orders migrations; it starts at 1.
	Version int
	// Name describes the change, e.g. "outbox".
	Name string
	// Up applies the change; Down reverts it. Both are plain SQL scripts
	// (several statements) without transaction control.
	Up, Down string
}

// MigrationStatus tells whether one migration is applied.
type MigrationStatus struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when not applied
}

// Direction selects the up or down script in Migrator.SQL.
type Direction int

// Migration directions.
const (
	DirectionUp Direction = iota + 1
	DirectionDown
)

// Migrator applies, reverts and prints the store's migrations for one schema
// and table. Applied versions are recorded in <schema>.outboxkit_migrations,
// keyed by table name, so several outbox tables can share a schema. Every
// change runs in one transaction under a transaction-scoped advisory lock on
// the schema, so concurrent migrators (several replicas starting at once)
// apply each version exactly once.
type Migrator struct {
	db         conns // nil: only SQL, Migrations, UpTx and DownTx
	n          names
	log        *slog.Logger
	migrations []Migration
	lockKey    int64

	// layout is the one cfg asked for; migrations are rendered for it.
	// A table that exists already keeps its own layout: other holds the
	// migrations rendered for the other one (partition.go).
	layout Partitioning
	other  []Migration
}

// NewMigrator returns a migrator for the schema and table in cfg (nil for the
// defaults) on db, a *pgxpool.Pool or a *sql.DB (Handle). db may be nil
// (a typed nil, e.g. (*pgxpool.Pool)(nil)) when only SQL, Migrations, UpTx
// or DownTx are used.
func NewMigrator[DB Handle](db DB, cfg *MigrateConfig) (*Migrator, error) {
	h, _, err := openHandle(db, "db")
	if err != nil {
		h = nil // allowed: see above
	}
	return newMigrator(h, cfg)
}

func newMigrator(db conns, cfg *MigrateConfig) (*Migrator, error) {
	var c MigrateConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	n, err := newNames(c.Schema, c.Table)
	if err != nil {
		return nil, err
	}
	if !c.Partitions.valid() {
		return nil, &core.ConfigError{Field: "Partitions", Reason: c.Partitions.String() + " is not a layout: use PartitionNone, " + partitionedChoices}
	}
	if c.PartitionsAhead < 0 {
		return nil, &core.ConfigError{Field: "PartitionsAhead", Reason: "must not be negative (0 means the default)"}
	}
	ms, err := renderLayout(n, c.Partitions, c.PartitionsAhead)
	if err != nil {
		return nil, err
	}
	// The other layout's rendering, for a table that already exists with
	// it: its unit only matters to the scripts that create the tables,
	// which such a table has applied.
	otherLayout := PartitionDaily
	if c.Partitions != PartitionNone {
		otherLayout = PartitionNone
	}
	other, err := renderLayout(n, otherLayout, 0)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	// The lock is per schema, not per table: CREATE SCHEMA IF NOT EXISTS
	// itself races when two tables of one schema are migrated at once.
	_, _ = h.Write([]byte("outboxkit/migrate/" + n.schema))
	return &Migrator{db: db, n: n, log: c.Logger, migrations: ms, lockKey: int64(h.Sum64()), layout: c.Partitions, other: other}, nil
}

// Migrate applies every pending migration for cfg's schema and table (nil
// for the defaults) in one transaction under an advisory lock. It is
// idempotent and safe to call from every replica at start-up.
//
// db is a *pgxpool.Pool or a *sql.DB; with database/sql, or through
// PgBouncer in transaction mode, it works the same: everything runs in
// one transaction and the lock is transaction-scoped.
func Migrate[DB Handle](ctx context.Context, db DB, cfg *MigrateConfig) error {
	h, _, err := openHandle(db, "db")
	if err != nil {
		return err
	}
	m, err := newMigrator(h, cfg)
	if err != nil {
		return err
	}
	_, err = m.Up(ctx)
	return err
}

// MigrateTx is Migrate within the caller's transaction, for programs that
// migrate several components atomically. The advisory lock is held until the
// transaction ends.
func MigrateTx(ctx context.Context, tx pgx.Tx, cfg *MigrateConfig) error {
	m, err := newMigrator(nil, cfg)
	if err != nil {
		return err
	}
	_, err = m.UpTx(ctx, tx)
	return err
}

// MigrationSQL returns the script Migrate runs on an empty database, for
// teams that apply migrations with their own tool. It includes the version
// bookkeeping, so Migrate later sees the versions as applied.
func MigrationSQL(cfg *MigrateConfig) (string, error) {
	m, err := newMigrator(nil, cfg)
	if err != nil {
		return "", err
	}
	return m.SQL(DirectionUp), nil
}

// Migrations returns every migration rendered for the migrator's schema and
// table, oldest first.
func (m *Migrator) Migrations() []Migration { return slices.Clone(m.migrations) }

// Up applies every pending migration and returns the versions it applied.
func (m *Migrator) Up(ctx context.Context) ([]int, error) {
	if err := m.needPool(); err != nil {
		return nil, err
	}
	var applied []int
	err := pgx.BeginFunc(ctx, m.db, func(tx pgx.Tx) error {
		var err error
		applied, err = m.UpTx(ctx, tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// UpTx is Up within the caller's transaction.
func (m *Migrator) UpTx(ctx context.Context, tx pgx.Tx) ([]int, error) {
	if err := m.begin(ctx, tx); err != nil {
		return nil, err
	}
	done, err := m.appliedVersions(ctx, tx)
	if err != nil {
		return nil, err
	}
	ms, err := m.forTable(ctx, tx, true)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, mg := range ms {
		if _, ok := done[mg.Version]; ok {
			continue
		}
		if _, err := tx.Exec(ctx, mg.Up); err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: apply migration %03d_%s: %w", mg.Version, mg.Name, err)
		}
		if _, err := tx.Exec(ctx, m.recordSQL(mg)); err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: record migration %03d_%s: %w", mg.Version, mg.Name, err)
		}
		m.log.InfoContext(ctx, "applied outbox migration", "schema", m.n.schema, "table", m.n.table, "version", mg.Version, "name", mg.Name)
		applied = append(applied, mg.Version)
	}
	return applied, nil
}

// Down reverts applied migrations newer than target, newest first, and
// returns the versions it reverted. Down(ctx, 0) removes every table the
// migrations created, with their data. The schema itself is kept: it may hold
// other things.
func (m *Migrator) Down(ctx context.Context, target int) ([]int, error) {
	if err := m.needPool(); err != nil {
		return nil, err
	}
	var reverted []int
	err := pgx.BeginFunc(ctx, m.db, func(tx pgx.Tx) error {
		var err error
		reverted, err = m.DownTx(ctx, tx, target)
		return err
	})
	if err != nil {
		return nil, err
	}
	return reverted, nil
}

// DownTx is Down within the caller's transaction.
func (m *Migrator) DownTx(ctx context.Context, tx pgx.Tx, target int) ([]int, error) {
	if target < 0 {
		return nil, fmt.Errorf("outboxkit/postgres: migrate down: target version %d is negative", target)
	}
	if err := m.begin(ctx, tx); err != nil {
		return nil, err
	}
	done, err := m.appliedVersions(ctx, tx)
	if err != nil {
		return nil, err
	}
	ms, err := m.forTable(ctx, tx, false)
	if err != nil {
		return nil, err
	}
	var reverted []int
	for i := len(ms) - 1; i >= 0; i-- {
		mg := ms[i]
		if mg.Version <= target {
			break
		}
		if _, ok := done[mg.Version]; !ok {
			continue
		}
		if _, err := tx.Exec(ctx, mg.Down); err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: revert migration %03d_%s: %w", mg.Version, mg.Name, err)
		}
		if _, err := tx.Exec(ctx, m.unrecordSQL(mg)); err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: unrecord migration %03d_%s: %w", mg.Version, mg.Name, err)
		}
		m.log.InfoContext(ctx, "reverted outbox migration", "schema", m.n.schema, "table", m.n.table, "version", mg.Version, "name", mg.Name)
		reverted = append(reverted, mg.Version)
	}
	return reverted, nil
}

// Status reports every known migration and whether it is applied. It writes
// nothing, so it works on a database where Migrate never ran.
func (m *Migrator) Status(ctx context.Context) ([]MigrationStatus, error) {
	if err := m.needPool(); err != nil {
		return nil, err
	}
	out := make([]MigrationStatus, len(m.migrations))
	for i, mg := range m.migrations {
		out[i] = MigrationStatus{Version: mg.Version, Name: mg.Name}
	}
	var exists bool
	if err := m.db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", m.n.versions).Scan(&exists); err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: migration status: %w", interpretError(err))
	}
	if !exists {
		return out, nil
	}
	rows, err := m.db.Query(ctx, "SELECT version, applied_at FROM "+m.n.versions+" WHERE target = $1", m.n.table)
	if err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: migration status: %w", interpretError(err))
	}
	applied := map[int]time.Time{}
	var (
		v  int
		at time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error { applied[v] = at; return nil })
	if err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: migration status: %w", interpretError(err))
	}
	for i := range out {
		if at, ok := applied[out[i].Version]; ok {
			out[i].Applied, out[i].AppliedAt = true, at
		}
	}
	return out, nil
}

// SQL returns the whole script Up (from an empty database) or Down (to
// version 0, from a fully migrated one) runs, statement for statement,
// wrapped in BEGIN and COMMIT. Migrate executes exactly these statements, so
// applying the script by hand leaves the database as Migrate would.
func (m *Migrator) SQL(d Direction) string {
	var b strings.Builder
	dir := "up"
	if d == DirectionDown {
		dir = "down"
	}
	fmt.Fprintf(&b, "-- outboxkit migrations (%s) for schema %s, table %s.\n", dir, m.n.schemaQ, pgx.Identifier{m.n.table}.Sanitize())
	b.WriteString("-- Generated by postgres.MigrationSQL; do not edit.\nBEGIN;\n\n")
	for _, s := range m.bootstrapSQL() {
		b.WriteString(s)
		b.WriteString("\n\n")
	}
	write := func(label, body, book string) {
		b.WriteString(label)
		b.WriteString("\n")
		b.WriteString(body)
		if !strings.HasSuffix(body, "\n") {
			b.WriteString("\n")
		}
		b.WriteString(book)
		b.WriteString("\n\n")
	}
	if d == DirectionDown {
		for i := len(m.migrations) - 1; i >= 0; i-- {
			mg := m.migrations[i]
			write(fmt.Sprintf("-- %03d_%s (down)", mg.Version, mg.Name), mg.Down, m.unrecordSQL(mg))
		}
	} else {
		for _, mg := range m.migrations {
			write(fmt.Sprintf("-- %03d_%s", mg.Version, mg.Name), mg.Up, m.recordSQL(mg))
		}
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}

func (m *Migrator) needPool() error {
	if m.db == nil {
		return fmt.Errorf("outboxkit/postgres: this Migrator has no database handle: pass one to NewMigrator, or use UpTx/DownTx")
	}
	return nil
}

// begin takes the advisory lock and makes sure the schema and the version
// table exist. The lock comes first so concurrent migrators never race on
// CREATE ... IF NOT EXISTS (which is not safe under concurrency).
func (m *Migrator) begin(ctx context.Context, tx pgx.Tx) error {
	for _, s := range m.bootstrapSQL() {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("outboxkit/postgres: prepare migrations: %w", err)
		}
	}
	return nil
}

func (m *Migrator) bootstrapSQL() []string {
	return []string{
		// The key is a literal so the printed script and the executed one are
		// the same text.
		"SELECT pg_advisory_xact_lock(" + strconv.FormatInt(m.lockKey, 10) + ");",
		// Not CREATE SCHEMA IF NOT EXISTS: that checks the CREATE privilege
		// on the database even when the schema exists, and application roles
		// often have rights on their schema only.
		"DO $outboxkit$ BEGIN\n" +
			"    IF to_regnamespace(" + quoteLiteral(m.n.schemaQ) + ") IS NULL THEN\n" +
			"        CREATE SCHEMA " + m.n.schemaQ + ";\n" +
			"    END IF;\n" +
			"END $outboxkit$;",
		"CREATE TABLE IF NOT EXISTS " + m.n.versions + " (\n" +
			"    target     text        NOT NULL,\n" +
			"    version    integer     NOT NULL,\n" +
			"    name       text        NOT NULL,\n" +
			"    applied_at timestamptz NOT NULL DEFAULT now(),\n" +
			"    PRIMARY KEY (target, version)\n" +
			");",
	}
}

func (m *Migrator) recordSQL(mg Migration) string {
	return fmt.Sprintf("INSERT INTO %s (target, version, name) VALUES (%s, %d, %s) ON CONFLICT DO NOTHING;",
		m.n.versions, quoteLiteral(m.n.table), mg.Version, quoteLiteral(mg.Name))
}

func (m *Migrator) unrecordSQL(mg Migration) string {
	return fmt.Sprintf("DELETE FROM %s WHERE target = %s AND version = %d;", m.n.versions, quoteLiteral(m.n.table), mg.Version)
}

func (m *Migrator) appliedVersions(ctx context.Context, tx pgx.Tx) (map[int]struct{}, error) {
	rows, err := tx.Query(ctx, "SELECT version FROM "+m.n.versions+" WHERE target = $1", m.n.table)
	if err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: read applied migrations: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: read applied migrations: %w", err)
	}
	done := make(map[int]struct{}, len(vs))
	for _, v := range vs {
		done[v] = struct{}{}
	}
	return done, nil
}

// forTable returns the migrations for the table as it is: a table that
// exists keeps its layout, whatever the configuration asks for, except
// that asking for partitions on an existing plain table is refused (up
// only): converting it is ConvertToPartitioned's work, online, not a
// migration's.
func (m *Migrator) forTable(ctx context.Context, tx pgx.Tx, up bool) ([]Migration, error) {
	var kind pgtype.Text
	if err := tx.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)", m.n.outbox).Scan(&kind); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("outboxkit/postgres: read the outbox table's layout: %w", err)
	}
	switch {
	case !kind.Valid:
		return m.migrations, nil
	case kind.String == "p":
		if m.layout == PartitionNone {
			return m.other, nil
		}
		return m.migrations, nil
	case m.layout != PartitionNone && up:
		return nil, &LayoutError{Schema: m.n.schema, Table: m.n.table, Have: PartitionNone, Want: m.layout}
	case m.layout != PartitionNone:
		return m.other, nil
	}
	return m.migrations, nil
}

// LayoutError reports an outbox table that exists with another layout
// than the one asked for: Migrate does not convert a plain table to the
// partitioned layout (ConvertToPartitioned does, online).
type LayoutError struct {
	Schema, Table string
	Have, Want    Partitioning
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("outboxkit/postgres: outbox table %q in schema %q has the %s layout, not %s: convert it with postgres.ConvertToPartitioned (`outboxctl migrate --partitions %s` does) while writers and relays keep running, or migrate without Partitions",
		e.Table, e.Schema, layoutName(e.Have), e.Want, e.Want)
}

func layoutName(p Partitioning) string {
	if p == PartitionNone {
		return "plain"
	}
	return p.String() + " partitioned"
}

// templateNames are the fields migration templates may use: every string
// is a validated, quoted identifier (or, for the *Literal fields, a string
// literal of one), every other field a number of the package's own.
type templateNames struct {
	Schema, Outbox, Aggregates, Processed, ClaimSlot                                   string
	PendingIndex, PublishedIndex, DeadIndex, AggregateIndex, ProcessedIndex, SlotIndex string
	AttemptsCheck                                                                      string
	Sequences, SequenceGaps, SequenceParked                                            string

	// ValidateMaxBytes is validateCheckMaxBytes.
	ValidateMaxBytes int64

	// The partitioned layout's (*.partitioned.up.sql): the default
	// partitions, the headers check's name, the raw names as literals
	// for format(), the outbox table's period (its length in seconds,
	// which the bounds are computed from, as interval text for comments,
	// and to_char's pattern of a partition's suffix) and how many periods
	// to create after the current one, and the same of the processed
	// table, whose period is its own (processedLayout).
	OutboxDefault, ProcessedDefault, HeadersCheck                string
	SchemaLiteral, TableLiteral, OutboxLiteral, ProcessedLiteral string
	PartitionInterval, PartitionStamp                            string
	PartitionSeconds                                             int64
	PartitionsAhead                                              int
	ProcessedInterval, ProcessedStamp                            string
	ProcessedSeconds                                             int64
	ProcessedAhead                                               int
}

// validateCheckMaxBytes is the largest table (main fork) whose new check
// constraint a migration validates in its own transaction, under the
// ACCESS EXCLUSIVE lock the ALTER TABLE took: 64 MiB scans in well under a
// second. A larger table's check is left NOT VALID for the operator to
// validate without that lock (docs/SCHEMA.md).
const validateCheckMaxBytes = 64 << 20

// renderMigrations reads the embedded templates, pairs up and down files by
// version, and renders them for n, in the plain layout.
func renderMigrations(n names) ([]Migration, error) {
	return renderLayout(n, PartitionNone, 0)
}

// renderLayout is renderMigrations for a layout: a migration with a
// NNN_name.partitioned.up.sql (or .down.sql) uses it in the partitioned
// layout in place of the plain file.
func renderLayout(n names, layout Partitioning, ahead int) ([]Migration, error) {
	pn := newPartNames(n)
	unit := layout
	if unit == PartitionNone {
		unit = PartitionDaily
	}
	punit := unit.processedLayout()
	outboxAhead, processedAhead := aheadOf(unit, unit, ahead), aheadOf(punit, unit, ahead)
	tn := templateNames{
		Schema: n.schemaQ, Outbox: n.outbox, Aggregates: n.aggregates, Processed: n.processed, ClaimSlot: n.claimSlot,
		PendingIndex: n.pendingIdx, PublishedIndex: n.publishedIdx, DeadIndex: n.deadIdx,
		AggregateIndex: n.aggregateIdx, ProcessedIndex: n.processedIdx, SlotIndex: n.slotIdx,
		AttemptsCheck: n.attemptsCheck, ValidateMaxBytes: validateCheckMaxBytes,
		Sequences: n.sequences, SequenceGaps: n.sequenceGaps, SequenceParked: n.sequenceParked,

		OutboxDefault: pn.outboxDefault, ProcessedDefault: pn.processedDefault, HeadersCheck: pn.headersCheck,
		SchemaLiteral: quoteLiteral(n.schema), TableLiteral: quoteLiteral(n.table),
		OutboxLiteral: quoteLiteral(n.outbox), ProcessedLiteral: quoteLiteral(n.processed),
		PartitionInterval: unit.interval(), PartitionStamp: unit.stamp(),
		PartitionSeconds: int64(unit.period() / time.Second), PartitionsAhead: outboxAhead,
		ProcessedInterval: punit.interval(), ProcessedStamp: punit.stamp(),
		ProcessedSeconds: int64(punit.period() / time.Second), ProcessedAhead: processedAhead,
	}
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: read embedded migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	partitioned := map[string]bool{} // "<version>.<dir>" with a partitioned variant
	for _, e := range entries {
		if b, ok := strings.CutSuffix(e.Name(), ".partitioned.up.sql"); ok {
			partitioned[b+".up"] = true
		} else if b, ok := strings.CutSuffix(e.Name(), ".partitioned.down.sql"); ok {
			partitioned[b+".down"] = true
		}
	}
	for _, e := range entries {
		file := e.Name()
		base, dir, ok := strings.Cut(strings.TrimSuffix(file, ".sql"), ".")
		variant, isVariant := strings.CutPrefix(dir, "partitioned.")
		if isVariant {
			dir = variant
		}
		if isVariant != (layout != PartitionNone) && (isVariant || partitioned[base+"."+dir]) {
			continue // the other layout's file
		}
		vs, name, ok2 := strings.Cut(base, "_")
		v, err := strconv.Atoi(vs)
		if !ok || !ok2 || err != nil || v < 1 || (dir != "up" && dir != "down") {
			return nil, fmt.Errorf("outboxkit/postgres: embedded migration %q is not named NNN_name.up.sql or NNN_name.down.sql", file)
		}
		raw, err := migrationFiles.ReadFile("migrations/" + file)
		if err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: read embedded migration %s: %w", file, err)
		}
		t, err := template.New(file).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: parse embedded migration %s: %w", file, err)
		}
		var b strings.Builder
		if err := t.Execute(&b, tn); err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: render embedded migration %s: %w", file, err)
		}
		mg := byVersion[v]
		if mg == nil {
			mg = &Migration{Version: v, Name: name}
			byVersion[v] = mg
		}
		if dir == "up" {
			mg.Up = b.String()
		} else {
			mg.Down = b.String()
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, mg := range byVersion {
		if mg.Up == "" || mg.Down == "" {
			return nil, fmt.Errorf("outboxkit/postgres: embedded migration %03d_%s lacks its up or down file", mg.Version, mg.Name)
		}
		out = append(out, *mg)
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, mg := range out {
		if mg.Version != i+1 {
			return nil, fmt.Errorf("outboxkit/postgres: embedded migrations skip version %d", i+1)
		}
	}
	return out, nil
}
