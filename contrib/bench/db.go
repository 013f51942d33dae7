package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// benchPayload is every preloaded event's body: small, like most outbox
// events, and the same for every system compared.
const benchPayload = `{"order": 12345, "status": "confirmed", "total": "99.95"}`

// preloadChunk is the number of rows each preload transaction writes: the
// preload uses COPY for speed, in transactions of this many rows so the
// table holds many transactions' rows, as a real outbox does.
const preloadChunk = 1000

// newPool opens a pool of maxConns connections on dsn and opens them all
// before returning, so no measurement pays for connecting. params are
// session settings (run-time parameters) for every connection.
func newPool(ctx context.Context, dsn string, maxConns int32, params ...string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse -dsn: %w", err)
	}
	for i := 0; i+1 < len(params); i += 2 {
		cfg.ConnConfig.RuntimeParams[params[i]] = params[i+1]
	}
	cfg.MaxConns = maxConns
	cfg.MinConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := warm(ctx, pool, int(maxConns)); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	return pool, nil
}

// warm acquires n connections at once and pings each.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.Ping(ctx); err != nil {
			return err
		}
	}
	return nil
}

// schema is a bench schema: created empty, dropped by drop.
type schema struct {
	name string
	pool *pgxpool.Pool
}

func newSchemaName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench_" + hex.EncodeToString(b[:])
}

func createSchema(ctx context.Context, admin *pgxpool.Pool) (*schema, error) {
	s := &schema{name: newSchemaName(), pool: admin}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+s.ident()); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", s.name, err)
	}
	return s, nil
}

func (s *schema) ident() string { return pgx.Identifier{s.name}.Sanitize() }

// table returns the quoted, schema-qualified name of table.
func (s *schema) table(table string) string { return pgx.Identifier{s.name, table}.Sanitize() }

// drop removes the schema and everything in it, even when ctx is done,
// with the publications outboxkit's migrations made for its tables (the
// WAL wake-up's): publications belong to the database, so DROP SCHEMA
// would leave them behind, empty, one per trial.
func (s *schema) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT pubname FROM pg_publication_tables WHERE schemaname = $1 AND pubname LIKE 'outboxkit%'`, s.name)
	if err != nil {
		return fmt.Errorf("publications of %s: %w", s.name, err)
	}
	pubs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("publications of %s: %w", s.name, err)
	}
	for _, p := range pubs {
		if _, err := s.pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{p}.Sanitize()); err != nil {
			return fmt.Errorf("drop publication %s: %w", p, err)
		}
	}
	_, err = s.pool.Exec(ctx, "DROP SCHEMA "+s.ident()+" CASCADE")
	return err
}

// outboxSchema creates a schema with outboxkit's tables.
func outboxSchema(ctx context.Context, admin *pgxpool.Pool) (*schema, error) {
	s, err := createSchema(ctx, admin)
	if err != nil {
		return nil, err
	}
	if err := postgres.Migrate(ctx, admin, &postgres.MigrateConfig{Schema: s.name}); err != nil {
		_ = s.drop()
		return nil, fmt.Errorf("migrate %s: %w", s.name, err)
	}
	return s, nil
}

// preloadOutbox writes n pending events into the outbox by COPY, in
// transactions of preloadChunk rows, then VACUUM ANALYZE (autovacuum may be
// off, and the planner must see the table as it is) and CHECKPOINT (the
// measurement that follows must not flush the preload's pages). It returns
// the IDs.
func preloadOutbox(ctx context.Context, s *schema, n int) ([]core.ID, error) {
	ids := make([]core.ID, n)
	for i := range ids {
		ids[i] = core.NewID()
	}
	payload := []byte(benchPayload)
	for start := 0; start < n; start += preloadChunk {
		end := min(start+preloadChunk, n)
		_, err := s.pool.CopyFrom(ctx, pgx.Identifier{s.name, postgres.DefaultTable}, []string{"id", "event_type", "payload"},
			pgx.CopyFromFunc(func() func() ([]any, error) {
				i := start
				return func() ([]any, error) {
					if i == end {
						return nil, nil
					}
					row := []any{pgtype.UUID{Bytes: ids[i], Valid: true}, "bench", payload}
					i++
					return row, nil
				}
			}()))
		if err != nil {
			return nil, fmt.Errorf("preload outbox: %w", err)
		}
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+s.table(postgres.DefaultTable)); err != nil {
		return nil, fmt.Errorf("vacuum outbox: %w", err)
	}
	if _, err := s.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, fmt.Errorf("checkpoint after the preload: %w", err)
	}
	return ids, nil
}

// pendingCount counts events neither published nor dead-lettered.
func pendingCount(ctx context.Context, s *schema) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.table(postgres.DefaultTable)+
		` WHERE published_at IS NULL AND dead_at IS NULL`).Scan(&n)
	return n, err
}

// tableCount counts the rows of table.
func tableCount(ctx context.Context, s *schema, table string) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.table(table)).Scan(&n)
	return n, err
}

// monotonic nanoseconds since the process started measuring; safe to
// compare across goroutines.
var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// onceErr keeps the first error of several goroutines.
type onceErr struct {
	mu  sync.Mutex
	err error
}

func (o *onceErr) set(err error) {
	if err == nil {
		return
	}
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
}

func (o *onceErr) get() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}
