package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// connectTimeout bounds connecting to PostgreSQL when the URL does not set
// connect_timeout: without it a firewalled host hangs for minutes before
// the operator learns anything.
const connectTimeout = 10 * time.Second

// connect opens a pool on the configured database and checks that the
// server answers, so an unreachable database is reported before any work
// starts. minConns raises the pool size for commands that run statements
// concurrently (the relay), unless the URL sets pool_max_conns.
func (a *app) connect(ctx context.Context, minConns int32) (*pgxpool.Pool, error) {
	if a.g.databaseURL == "" {
		a.g.databaseURL = localDatabaseURL
		a.warn("neither --database-url nor DATABASE_URL is set: using the local development database %s", localDatabaseURL)
	}
	a.addURLSecrets(a.g.databaseURL)
	if userinfoNeedsEscaping(a.g.databaseURL) {
		// pgx would misread it rather than refuse it: postgres://u:p@ss@h
		// connects to host "ss@h" with password "p".
		return nil, usageError(fmt.Sprintf("--database-url %s: its user or password holds characters a URL cannot carry unescaped (an at sign, slash, question mark, hash, space or non-ASCII): percent-encode them (%%40 for an at sign, %%2F for a slash, %%20 for a space) or use a keyword/value string with the password quoted",
			displayURL(a.g.databaseURL)))
	}
	cfg, err := pgxpool.ParseConfig(a.g.databaseURL)
	if err != nil {
		return nil, usageError(fmt.Sprintf("--database-url %s is not a PostgreSQL URL or connection string: %s: use postgres://user:password@host:5432/dbname?sslmode=require",
			displayURL(a.g.databaseURL), parseConfigReason(err)))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if cfg.MaxConns < minConns {
		cfg.MaxConns = minConns
	}
	// postgres.NewPoolWithConfig, not pgxpool's: through PgBouncer in
	// transaction mode its statements run unnamed, which survives it.
	pool, err := postgres.NewPoolWithConfig(ctx, cfg)
	if err != nil {
		return nil, a.dbError(err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout+5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, a.dbError(err)
	}
	return pool, nil
}

// openStore connects and returns the outbox store for the global schema and
// table, with ordering and notifications as the relay asks.
func (a *app) openStore(ctx context.Context, minConns int32, cfg postgres.Config) (*pgxpool.Pool, *postgres.Store, error) {
	pool, err := a.connect(ctx, minConns)
	if err != nil {
		return nil, nil, err
	}
	cfg.Schema, cfg.Table = a.g.schema, a.g.table
	store, err := postgres.New(pool, &cfg)
	if err != nil {
		pool.Close()
		return nil, nil, a.dbError(err)
	}
	return pool, store, nil
}

// openMigrator connects and returns a migrator for the global schema and
// table.
func (a *app) openMigrator(ctx context.Context) (*pgxpool.Pool, *postgres.Migrator, error) {
	pool, err := a.connect(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	m, err := a.migrator(pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, m, nil
}

// migrator returns a migrator for the global schema and table; pool may be
// nil to print SQL only.
func (a *app) migrator(pool *pgxpool.Pool) (*postgres.Migrator, error) {
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: a.g.schema, Table: a.g.table})
	if err != nil {
		return nil, a.dbError(err)
	}
	return m, nil
}

// migrationState is which of the migrations this outboxctl knows the
// schema has applied (status --json prints it).
type migrationState struct {
	Applied int   `json:"applied"`
	Known   int   `json:"known"`
	Missing []int `json:"missing"`
	// Current is true when nothing is missing; relays refuse to start
	// otherwise.
	Current bool `json:"current"`
}

// migrationState reads the schema's applied migration versions; it works
// on a schema where migrate never ran (everything is missing).
func (a *app) migrationState(ctx context.Context, pool *pgxpool.Pool) (migrationState, error) {
	m, err := a.migrator(pool)
	if err != nil {
		return migrationState{}, err
	}
	st, err := m.Status(ctx)
	if err != nil {
		return migrationState{}, a.dbError(err)
	}
	ms := migrationState{Known: len(st), Missing: []int{}}
	for _, s := range st {
		if s.Applied {
			ms.Applied++
		} else {
			ms.Missing = append(ms.Missing, s.Version)
		}
	}
	ms.Current = len(ms.Missing) == 0
	return ms, nil
}

// notMigrated is the error for a schema that lacks migrations.
func (a *app) notMigrated(ms migrationState) error {
	return fmt.Errorf("schema %q (table %q) at %s lacks migration(s) %v: run `outboxctl migrate --schema %s --table %s` first",
		a.g.schema, a.g.table, displayURL(a.g.databaseURL), ms.Missing, a.g.schema, a.g.table)
}

// checkMigrated fails with the migrate hint when any migration is missing,
// so a relay refuses to start on a schema it would fail on at every poll.
func (a *app) checkMigrated(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := a.migrationState(ctx, pool)
	if err != nil {
		return err
	}
	if !ms.Current {
		return a.notMigrated(ms)
	}
	return nil
}

// parseConfigReason says why pgx could not parse the connection string.
// pgx's message quotes the string with its password redacted as best it
// can, which is least reliable on strings that do not parse; the quote is
// dropped, and what remains is redacted like every message.
func parseConfigReason(err error) string {
	msg := err.Error()
	// "cannot parse `<string>`: <reason>"
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	}
	return msg
}

// userinfoNeedsEscaping reports whether raw is a URL whose userinfo (up to
// the last "@") holds a character RFC 3986 does not allow there unescaped.
func userinfoNeedsEscaping(raw string) bool {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return false
	}
	for _, c := range []byte(rest[:at]) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("@/?#[]\"<>`^{|}", c) >= 0 {
			return true
		}
	}
	return false
}
