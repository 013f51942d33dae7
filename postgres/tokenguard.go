package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
)

// DefaultTokenTable names the TokenGuard's table when none is configured.
const DefaultTokenTable = "outboxkit_qstash_tokens"

// tokenPruneBatch bounds the expired tokens each FirstUse deletes: more than
// the one it inserts, so the table shrinks back to the live tokens once a
// burst has passed, and few enough to keep the statement short.
const tokenPruneBatch = 16

// TokenGuardConfig configures a TokenGuard. The zero value is usable.
type TokenGuardConfig struct {
	// Schema holds the table. Defaults to "public".
	Schema string
	// Table is the table of accepted tokens. Defaults to
	// DefaultTokenTable.
	Table string
}

// TokenGuard is a replay guard for QStash consumers that run several
// instances: it records the ID (jti) of every signature token a
// qstash.Receiver accepted in one table, until the token expires, so a
// captured delivery replayed to any instance is refused. It implements
// qstash.ReplayGuard (the interface uses standard types only, so this
// package does not import qstash):
//
//	guard, err := postgres.NewTokenGuard(pool, nil)
//	if err != nil { ... }
//	if err := guard.CreateTable(ctx); err != nil { ... } // or run CreateTableSQL with your migration tool
//	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{..., ReplayGuard: guard})
//
// Each FirstUse is one statement: it inserts the token and deletes a few
// expired ones. Expiry is judged by the database's now(), so instances with
// skewed clocks agree.
type TokenGuard struct {
	db        DBTX
	table     string // quoted, qualified
	createSQL string
	firstUse  string
}

// NewTokenGuard returns a guard on db (a pool: each call is one statement);
// cfg may be nil. It performs no I/O and creates nothing: call CreateTable,
// or run CreateTableSQL yourself, before the first delivery.
func NewTokenGuard(db DBTX, cfg *TokenGuardConfig) (*TokenGuard, error) {
	if db == nil {
		return nil, &core.ConfigError{Field: "db", Reason: "is nil: pass the consumer's *pgxpool.Pool"}
	}
	var c TokenGuardConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTokenTable
	}
	if err := validateIdentifier("schema name", c.Schema, maxIdentifierBytes); err != nil {
		return nil, err
	}
	// "_expires_idx" is appended for the index.
	if err := validateIdentifier("table name", c.Table, maxIdentifierBytes-len("_expires_idx")); err != nil {
		return nil, err
	}
	t := pgx.Identifier{c.Schema, c.Table}.Sanitize()
	idx := pgx.Identifier{c.Table + "_expires_idx"}.Sanitize()
	return &TokenGuard{
		db:    db,
		table: t,
		createSQL: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	token_id   text        PRIMARY KEY,
	expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + t + ` (expires_at);
`,
		// The CTE deletes expired tokens other than $1 (a row must not be
		// both deleted and upserted by one statement). The upsert takes an
		// expired row with the same ID over as a first use, and leaves a
		// live one alone, in which case no row is affected.
		firstUse: `WITH pruned AS (
	DELETE FROM ` + t + ` WHERE token_id IN (
		SELECT token_id FROM ` + t + ` WHERE expires_at < now() AND token_id <> $1
		ORDER BY expires_at LIMIT ` + fmt.Sprint(tokenPruneBatch) + ` FOR UPDATE SKIP LOCKED)
)
INSERT INTO ` + t + ` AS g (token_id, expires_at) VALUES ($1, $2)
ON CONFLICT (token_id) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE g.expires_at < now()`,
	}, nil
}

// CreateTableSQL returns the statements CreateTable runs, for teams that
// apply schema changes with their own migration tool.
func (g *TokenGuard) CreateTableSQL() string { return g.createSQL }

// CreateTable creates the table and its index if they do not exist. It is
// the only statement that creates anything, and runs only when called.
func (g *TokenGuard) CreateTable(ctx context.Context) error {
	if _, err := g.db.Exec(ctx, g.createSQL); err != nil {
		return fmt.Errorf("postgres: create token guard table %s: %w", g.table, err)
	}
	return nil
}

// FirstUse records tokenID until expires and reports whether this is its
// first use (qstash.ReplayGuard). Concurrent calls with one ID serialise on
// the primary key: exactly one of them reports true.
func (g *TokenGuard) FirstUse(ctx context.Context, tokenID string, expires time.Time) (bool, error) {
	tag, err := g.db.Exec(ctx, g.firstUse, tokenID, expires)
	if err != nil {
		return false, fmt.Errorf("postgres: record token in %s: %w", g.table, err)
	}
	return tag.RowsAffected() == 1, nil
}
