package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outboxkit/core"
)

// Sentinel errors. Match them with errors.Is; the errors returned wrap the
// driver's error too, so *pgconn.PgError stays reachable with errors.As.
var (
	// ErrInvalidIdentifier is matched by every *IdentifierError.
	ErrInvalidIdentifier = errors.New("outboxkit/postgres: invalid identifier")
	// ErrNotMigrated is matched when a table or column the store needs does
	// not exist: run Migrate (or apply MigrationSQL) for this schema and table.
	ErrNotMigrated = errors.New("outboxkit/postgres: outbox schema is missing or out of date: run postgres.Migrate")
	// ErrDuplicateEvent is matched when an event with the same ID is already
	// in the outbox. Event IDs are idempotency keys, so writing one twice is
	// refused rather than ignored.
	ErrDuplicateEvent = errors.New("outboxkit/postgres: an event with this ID already exists")
	// ErrNotFound is matched when Get finds no event with the given ID.
	ErrNotFound = errors.New("outboxkit/postgres: event not found")
	// ErrEmptyFilter is matched when Replay or Purge get a filter with no
	// criterion: acting on every event must be asked for with
	// core.ReplayFilter.All.
	ErrEmptyFilter = errors.New("outboxkit/postgres: filter is empty: set IDs, Types, an aggregate, a time range or DeadOnly, or All to match every event")
	// ErrNoTx is matched when an Effect handler runs without the transaction
	// a Deduper passes through its context: wrap the handler with the
	// Deduper (core.Idempotent or core.ApplyOnce).
	ErrNoTx = errors.New("outboxkit/postgres: no transaction in context: run this handler through a postgres.Deduper")
	// ErrPreparedStatementLost is matched when the server does not have a
	// prepared statement the pool's connection thinks it prepared, or
	// already has one it is preparing (SQLSTATE 26000, 42P05): the mark of
	// pgx's default statement cache behind PgBouncer in transaction mode,
	// which hands each transaction whichever server connection is free.
	ErrPreparedStatementLost = errors.New("outboxkit/postgres: the pool prepares statements, which PgBouncer in transaction mode before 1.21 does not keep: open the pool with postgres.NewPool, or add default_query_exec_mode=cache_describe (or exec) to the connection URL")
)

// IdentifierError reports a schema, table or channel name that cannot be
// used. It matches ErrInvalidIdentifier and core.ErrInvalidConfig.
type IdentifierError struct {
	// What names the setting, e.g. "schema name".
	What string
	// Name is the refused value.
	Name string
	// Reason says what is wrong and what to do.
	Reason string
}

func (e *IdentifierError) Error() string {
	return fmt.Sprintf("outboxkit/postgres: %s %q is not a valid identifier: %s", e.What, e.Name, e.Reason)
}

// Is makes errors.Is match ErrInvalidIdentifier and core.ErrInvalidConfig.
func (e *IdentifierError) Is(target error) bool {
	return target == ErrInvalidIdentifier || target == core.ErrInvalidConfig
}

// PostgreSQL error codes the store gives a meaning to.
const (
	codeUniqueViolation   = "23505"
	codeUndefinedTable    = "42P01"
	codeUndefinedColumn   = "42703"
	codeInvalidSchemaName = "3F000"
	codeUndefinedFunction = "42883"
	// invalid_sql_statement_name ("prepared statement ... does not
	// exist") and duplicate_prepared_statement ("... already exists").
	codeNoPreparedStatement  = "26000"
	codeDupPreparedStatement = "42P05"
)

// interpretError is the one place driver errors are translated. It keeps the
// original error in the chain (so *pgconn.PgError and context errors stay
// reachable) and adds the package's sentinel when the error has a meaning
// here.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeUndefinedTable, codeUndefinedColumn, codeInvalidSchemaName, codeUndefinedFunction:
			return fmt.Errorf("%w: %w", ErrNotMigrated, err)
		case codeUniqueViolation:
			return fmt.Errorf("%w: %w", ErrDuplicateEvent, err)
		case codeNoPreparedStatement, codeDupPreparedStatement:
			return fmt.Errorf("%w: %w", ErrPreparedStatementLost, err)
		}
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
