package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewPool opens a pgxpool.Pool on connString (a postgres:// URL or a
// key=value connection string, with pgxpool's pool_* settings) that works
// through PgBouncer in transaction mode as well as directly.
//
// pgx's default statement cache prepares named statements on the server
// connection it happens to hold, and PgBouncer before 1.21 hands the next
// transaction another server connection, which does not have them
// (`prepared statement "stmtcache_…" does not exist`). So when
// connString does not choose a default_query_exec_mode and a first
// connection shows that it goes through a pooler (detectProxy, pooler.go),
// NewPool sets pgx.QueryExecModeCacheDescribe: unnamed statements, still
// one round trip and binary, whatever server connection runs them. It
// says so once, through slog.Default(), with what it saw.
//
// With a direct connection, or a connString that sets
// default_query_exec_mode, the pool is exactly what pgxpool.New returns.
// The detection has false positives (a Kubernetes Service, Docker's
// published ports, a TCP load balancer: any address translation); they
// cost PostgreSQL the planning of each statement, which a prepared
// statement saves. Add default_query_exec_mode=cache_statement to keep
// prepared statements there, or to use PgBouncer 1.21's
// max_prepared_statements.
//
// Unlike pgxpool.New, which connects lazily, NewPool connects once at
// once, and returns an error when that fails: check that the database (or
// PgBouncer) is up and the URL right.
func NewPool(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("outboxkit/postgres: NewPool: %w", err)
	}
	return NewPoolWithConfig(ctx, cfg)
}

// NewPoolWithConfig is NewPool for a configuration from
// pgxpool.ParseConfig that the caller adjusted (pool size, timeouts,
// hooks): it chooses the exec mode as NewPool does, reading what the
// connection string set from cfg.ConnString(), and opens the pool with
// pgxpool.NewWithConfig. It may change cfg.ConnConfig.DefaultQueryExecMode.
func NewPoolWithConfig(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	cc := cfg.ConnConfig
	if !setsExecMode(cfg.ConnString()) && cc.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement && cc.StatementCacheCapacity > 0 {
		v, err := probeProxy(ctx, &cc.Config)
		if err != nil {
			return nil, fmt.Errorf("outboxkit/postgres: NewPool connects once to tell whether the database is behind a pooler, and could not (%w): check that PostgreSQL or PgBouncer is up and the connection string right", err)
		}
		if v.Proxied {
			cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
			slog.Default().InfoContext(ctx, "outboxkit: the pool's connections go through a proxy or pooler, so its statements run unnamed (default_query_exec_mode=cache_describe): pgx's prepared statements would not survive PgBouncer in transaction mode before 1.21; add default_query_exec_mode=cache_statement to the URL to keep them",
				"seen", v.Why, "host", cc.Host, "port", cc.Port)
		}
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// probeProxy opens one connection with cfg, runs detectProxy on it and
// closes it.
func probeProxy(ctx context.Context, cfg *pgconn.Config) (proxyVerdict, error) {
	conn, err := pgconn.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return proxyVerdict{}, err
	}
	defer closeQuietly(ctx, conn.Close)
	return detectProxy(ctx, conn)
}

// execModeKey is the connection-string setting NewPool leaves alone when
// it is given.
const execModeKey = "default_query_exec_mode"

// execModeInDSN matches the setting in a key=value connection string.
var execModeInDSN = regexp.MustCompile(`(^|\s)` + execModeKey + `\s*=`)

// setsExecMode reports whether connString chooses default_query_exec_mode
// itself; pgxpool.ParseConfig's result cannot tell "set to the default"
// from "not set".
func setsExecMode(connString string) bool {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			// ParseConfig accepted it; err on the side of the caller's
			// choice.
			return strings.Contains(connString, execModeKey)
		}
		return u.Query().Has(execModeKey)
	}
	return execModeInDSN.MatchString(connString)
}
