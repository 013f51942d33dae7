package postgres

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
)

// Handle is the database handle a Store, Deduper, Sequencer, Inbox or
// Migrator runs its own statements on: a *pgxpool.Pool, or a *sql.DB of
// any PostgreSQL driver (lib/pq, pgx's stdlib, or the one an ORM opened).
//
// Both run the same SQL. What only pgx offers is used when the handle is a
// pgx pool: settlements pipelined with the next claim, statements kept
// prepared once the table has grown (plans.go), and the wake-up
// connection's settings. A *sql.DB store settles and claims in two round
// trips, and wakes from Config.WakeupURL's connection when one is given,
// by polling otherwise (database/sql has no LISTEN).
type Handle interface {
	*pgxpool.Pool | *sql.DB
}

// conns is the seam between the package's SQL and a driver: what every
// component runs its own statements through. *pgxpool.Pool satisfies it
// as it is; sqlDB adapts a *sql.DB (sqlconn.go).
type conns interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
	// SendBatch runs the queued statements in one transaction, as pgx
	// runs a batch in one implicit transaction.
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// openHandle returns db's statements seam and, when db is a pgx pool, the
// pool itself (nil for a *sql.DB). what names the handle in the error for
// a nil one.
func openHandle[DB Handle](db DB, what string) (conns, *pgxpool.Pool, error) {
	switch h := any(db).(type) {
	case *pgxpool.Pool:
		if h != nil {
			return h, h, nil
		}
	case *sql.DB:
		if h != nil {
			return &sqlDB{db: h}, nil, nil
		}
	}
	return nil, nil, &core.ConfigError{Field: what, Reason: "is nil: pass the *pgxpool.Pool or *sql.DB to run on"}
}
