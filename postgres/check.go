package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Check implements core.Checker: it returns nil when the database answers
// and the store's schema holds the outbox tables at the migration version
// this build expects (or a later one: migrations only add, so a newer
// schema serves an older build during a rolling deploy). Otherwise the
// error says what to do: an unreachable database wraps the driver's
// error; a missing or outdated schema is a *SchemaError, which matches
// ErrNotMigrated. Relay.Run calls it before starting, so a missing table
// stops a deploy instead of leaving a relay that relays nothing.
func (s *Store) Check(ctx context.Context) error {
	want, err := latestMigration()
	if err != nil {
		return err
	}
	var outbox, versions bool
	err = s.db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL", s.n.outbox, s.n.versions).
		Scan(&outbox, &versions)
	if err != nil {
		return fmt.Errorf("outboxkit/postgres: check: the database did not answer (%w): check the pool's connection settings and that PostgreSQL is up", interpretError(err))
	}
	if !outbox || !versions {
		return &SchemaError{Schema: s.n.schema, Table: s.n.table, Want: want}
	}
	rows, err := s.db.Query(ctx, "SELECT version FROM "+s.n.versions+" WHERE target = $1", s.n.table)
	if err != nil {
		return wrap("check: read applied migrations", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return wrap("check: read applied migrations", err)
	}
	if have := contiguous(applied); have < want {
		return &SchemaError{Schema: s.n.schema, Table: s.n.table, Version: have, Want: want}
	}
	return nil
}

// SchemaError reports a schema the store cannot work with: the outbox
// tables are missing (Version 0) or their migrations are behind this
// build's. It matches ErrNotMigrated.
type SchemaError struct {
	Schema, Table string
	// Version is the highest migration applied with every earlier one; 0
	// when the tables are missing.
	Version int
	// Want is the version this build needs.
	Want int
}

func (e *SchemaError) Error() string {
	const fix = "run postgres.Migrate or `outboxctl migrate`"
	if e.Version == 0 {
		return fmt.Sprintf("outboxkit/postgres: schema %q has no outbox tables (table %q): %s", e.Schema, e.Table, fix)
	}
	return fmt.Sprintf("outboxkit/postgres: outbox table %q in schema %q is at migration version %d, this build needs %d: %s",
		e.Table, e.Schema, e.Version, e.Want, fix)
}

// Is makes errors.Is match ErrNotMigrated.
func (e *SchemaError) Is(target error) bool { return target == ErrNotMigrated }

// contiguous returns the highest version v such that 1..v are all in
// applied.
func contiguous(applied []int) int {
	have := make(map[int]bool, len(applied))
	for _, v := range applied {
		have[v] = true
	}
	v := 0
	for have[v+1] {
		v++
	}
	return v
}

// latestMigration is the highest version among the embedded migrations.
func latestMigration() (int, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return 0, fmt.Errorf("outboxkit/postgres: read embedded migrations: %w", err)
	}
	latest := 0
	for _, e := range entries {
		vs, _, _ := strings.Cut(e.Name(), "_")
		if v, err := strconv.Atoi(vs); err == nil && v > latest {
			latest = v
		}
	}
	return latest, nil
}
