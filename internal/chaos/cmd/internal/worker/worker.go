package worker

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// DB is the database a worker uses, from its flags.
type DB struct {
	URL, Schema, AppName string
	PoolSize             int
	// NewPool opens the pool with postgres.NewPool, which works through
	// PgBouncer in transaction mode, instead of pgxpool's defaults.
	NewPool bool
}

// Flags registers -database-url, -schema (described by schemaUse), -app-name
// (defaulting to name), -pool-size (defaulting to poolSize) and -new-pool
// on fs.
func (d *DB) Flags(fs *flag.FlagSet, name, schemaUse string, poolSize int) {
	fs.StringVar(&d.URL, "database-url", "", "PostgreSQL URL (required)")
	fs.StringVar(&d.Schema, "schema", "", schemaUse+" (required)")
	fs.StringVar(&d.AppName, "app-name", name, "application_name of every database connection")
	fs.IntVar(&d.PoolSize, "pool-size", poolSize, "database pool size")
	fs.BoolVar(&d.NewPool, "new-pool", false, "open the pool with postgres.NewPool (for -database-url through PgBouncer); it connects at start")
}

// WithAppName returns the postgres:// URL u with application_name set to
// name: how a connection string of the worker's own (a wake-up URL) is
// named like its pool.
func WithAppName(u, name string) (string, error) {
	return withParams(u, map[string]string{"application_name": name})
}

func withParams(u string, params map[string]string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
		return "", fmt.Errorf("%q is not a postgres:// URL", u)
	}
	q := pu.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	pu.RawQuery = q.Encode()
	return pu.String(), nil
}

// Pool opens a pool of d.PoolSize connections to d.URL, each named
// d.AppName (the LISTEN connection copies the pool's settings, so it is
// named too). It connects on first use: a worker started while the database
// is down keeps trying instead of exiting.
//
// With NewPool it opens the pool with postgres.NewPool instead, which
// connects at once.
func (d DB) Pool(ctx context.Context) (*pgxpool.Pool, error) {
	if d.NewPool {
		u, err := withParams(d.URL, map[string]string{"application_name": d.AppName, "pool_max_conns": strconv.Itoa(d.PoolSize)})
		if err != nil {
			return nil, err
		}
		return postgres.NewPool(ctx, u)
	}
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(d.PoolSize)
	cfg.ConnConfig.RuntimeParams["application_name"] = d.AppName
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Main parses the command line, runs run under a context that SIGTERM or
// SIGINT cancels (a graceful stop, exit 0), and exits 1 printing
// "name: error" when run fails.
func Main(name string, run func(ctx context.Context) error) {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
