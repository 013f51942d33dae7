package postgres_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Prune published events older than a week. A service runs ret.Run(ctx)
// in every relay process and one of them prunes; RunOnce is one pass, for
// a cron job.
func ExampleRetention() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// A real program uses its own schema; the example makes a throwaway one.
	schema := pgtest.NewSchemaName("example")
	defer func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		_, _ = pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{"outboxkit." + schema + ".outbox_events"}.Sanitize())
	}()
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	// Two published events, eight days and an hour ago, and a dead letter.
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+` (event_type, payload, published_at, dead_at) VALUES
    ('order.placed', '{}', now() - interval '8 days', NULL),
    ('order.paid', '{}', now() - interval '1 hour', NULL),
    ('order.refunded', '{}', NULL, now() - interval '30 days')`)
	if err != nil {
		fmt.Println(err)
		return
	}

	ret, err := postgres.NewRetention(pool, &postgres.RetentionConfig{
		Schema:          schema,
		RetainPublished: 0, // the default, 7 days; postgres.RetainForever keeps every published event
		Holder:          "example",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := ret.RunOnce(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("leader %v, deleted %d published event(s)\n", res.Leader, res.PublishedDeleted)
	var left int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "outbox_events"}.Sanitize()).Scan(&left)
	fmt.Println("rows left:", left)
	// Output:
	// leader true, deleted 1 published event(s)
	// rows left: 2
}
