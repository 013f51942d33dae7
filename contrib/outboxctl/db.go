package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	pool, err := a.openPool(ctx, a.g.databaseURL, minConns, false)
	if err != nil {
		return nil, a.dbError(err)
	}
	if err := pingPool(ctx, pool); err != nil {
		pool.Close()
		return nil, a.dbError(err)
	}
	return pool, nil
}

// connectURL is connect for any database URL; with exact, the pool has
// exactly conns connections whatever the URL says. Errors are the driver's,
// for the caller to explain with dbErrorAt.
func (a *app) connectURL(ctx context.Context, url string, conns int32, exact bool) (*pgxpool.Pool, error) {
	pool, err := a.openPool(ctx, url, conns, exact)
	if err != nil {
		return nil, err
	}
	if err := pingPool(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// openPool parses url and opens a pool on it.
func (a *app) openPool(ctx context.Context, url string, conns int32, exact bool) (*pgxpool.Pool, error) {
	a.addURLSecrets(url)
	if userinfoNeedsEscaping(url) {
		// pgx would misread it rather than refuse it: postgres://u:p@ss@h
		// connects to host "ss@h" with password "p".
		return nil, usageError(fmt.Sprintf("--database-url %s: its user or password holds characters a URL cannot carry unescaped (an at sign, slash, question mark, hash, space or non-ASCII): percent-encode them (%%40 for an at sign, %%2F for a slash, %%20 for a space) or use a keyword/value string with the password quoted",
			displayURL(url)))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageError(fmt.Sprintf("--database-url %s is not a PostgreSQL URL or connection string: %s: use postgres://user:password@host:5432/dbname?sslmode=require",
			displayURL(url), parseConfigReason(err)))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if exact || cfg.MaxConns < conns {
		cfg.MaxConns = conns
	}
	// postgres.NewPoolWithConfig, not pgxpool's: through PgBouncer in
	// transaction mode its statements run unnamed, which survives it.
	return postgres.NewPoolWithConfig(ctx, cfg)
}

// pingPool checks that the server answers, bounded so a firewalled host
// does not hang the caller.
func pingPool(ctx context.Context, pool *pgxpool.Pool) error {
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout+5*time.Second)
	defer cancel()
	return pool.Ping(pingCtx)
}

// databaseLabel names a database in metrics, logs and /readyz without its
// credentials: host:port/dbname.
func databaseLabel(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return displayURL(url)
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
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
	return notMigratedAt(ms, a.g.databaseURL, a.g.schema, a.g.table)
}

func notMigratedAt(ms migrationState, url, schema, table string) error {
	return fmt.Errorf("schema %q (table %q) at %s lacks migration(s) %v: run `outboxctl migrate --schema %s --table %s` first",
		schema, table, displayURL(url), ms.Missing, schema, table)
}

// checkTenantMigrated is checkMigrated for one tenant of the relay.
func (a *app) checkTenantMigrated(ctx context.Context, pool *pgxpool.Pool, url, schema, table string) error {
	m, err := postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: schema, Table: table})
	if err != nil {
		return a.dbErrorAt(err, url, schema, table)
	}
	st, err := m.Status(ctx)
	if err != nil {
		return a.dbErrorAt(err, url, schema, table)
	}
	ms := migrationState{Known: len(st), Missing: []int{}}
	for _, s := range st {
		if !s.Applied {
			ms.Missing = append(ms.Missing, s.Version)
		}
	}
	if len(ms.Missing) > 0 {
		return notMigratedAt(ms, url, schema, table)
	}
	return nil
}

// discoverSchemas lists the schemas holding table, for --schemas '*'.
func discoverSchemas(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = $1 AND c.relkind IN ('r', 'p') AND n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema'
ORDER BY 1`, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// tenantSchemas is the database's listed schemas, or those found now.
func (a *app) tenantSchemas(ctx context.Context, pool *pgxpool.Pool, d databaseSpec) ([]string, error) {
	if !d.discover() {
		return d.Schemas, nil
	}
	found, err := discoverSchemas(ctx, pool, d.Table)
	if err != nil {
		return nil, a.dbErrorAt(err, d.URL, "*", d.Table)
	}
	return found, nil
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
