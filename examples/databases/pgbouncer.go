package databases

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// OpenThroughPgBouncer opens the pool through PgBouncer in transaction
// mode (bouncerURL) and gives the store's wake-up connection PostgreSQL
// itself (directURL): PgBouncer can hold neither a LISTEN nor a
// replication connection.
func OpenThroughPgBouncer(ctx context.Context, bouncerURL, directURL, schema string) (*pgxpool.Pool, *postgres.Store, error) {
	pool, err := postgres.NewPool(ctx, bouncerURL) // statements that survive PgBouncer
	if err != nil {
		return nil, nil, err
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema, WakeupURL: directURL})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, store, nil
}
