package worker

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is the database a worker uses, from its flags.
type DB struct {
	URL, Schema, AppName string
	PoolSize             int
}

// Flags registers -database-url, -schema (described by schemaUse), -app-name
// (defaulting to name) and -pool-size (defaulting to poolSize) on fs.
func (d *DB) Flags(fs *flag.FlagSet, name, schemaUse string, poolSize int) {
	fs.StringVar(&d.URL, "database-url", "", "PostgreSQL URL (required)")
	fs.StringVar(&d.Schema, "schema", "", schemaUse+" (required)")
	fs.StringVar(&d.AppName, "app-name", name, "application_name of every database connection")
	fs.IntVar(&d.PoolSize, "pool-size", poolSize, "database pool size")
}

// Pool opens a pool of d.PoolSize connections to d.URL, each named
// d.AppName (the LISTEN connection copies the pool's settings, so it is
// named too). It connects on first use: a worker started while the database
// is down keeps trying instead of exiting.
func (d DB) Pool(ctx context.Context) (*pgxpool.Pool, error) {
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
