package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Write an event in the same transaction as a business change, then relay
// it.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// A real program uses its own schema; the example makes a throwaway one.
	schema := pgtest.NewSchemaName("example")
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") //nolint:errcheck // example cleanup

	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the business change goes here, through tx ...
		e, err := core.NewEvent("order.confirmed", map[string]any{"order": 42})
		if err != nil {
			return err
		}
		return store.Add(ctx, tx, e)
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		for _, e := range events {
			fmt.Printf("published %s %s\n", e.Type, e.Payload)
		}
		return nil
	})
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{LeaseDuration: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := relay.Drain(ctx)
	fmt.Println("settled", n, err)
	// Output:
	// published order.confirmed {"order": 42}
	// settled 1 <nil>
}

// With NotifyAfterCommit, write through InTx: it commits, then wakes the
// relays with a notification of its own. Code that commits by itself calls
// store.Notify() after its Commit instead.
func ExampleStore_InTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	schema := pgtest.NewSchemaName("example")
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") //nolint:errcheck // example cleanup
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema, Notify: postgres.NotifyAfterCommit})
	if err != nil {
		fmt.Println(err)
		return
	}

	err = store.InTx(ctx, pool, func(tx pgx.Tx) error {
		// ... the business change goes here, through tx ...
		e, err := core.NewEvent("order.confirmed", map[string]any{"order": 42})
		if err != nil {
			return err
		}
		return store.Add(ctx, tx, e)
	})
	fmt.Println("committed and notified:", err)
	// Output:
	// committed and notified: <nil>
}

// Print the migration script for a team that applies migrations with its own
// tool.
func ExampleMigrationSQL() {
	script, err := postgres.MigrationSQL(&postgres.MigrateConfig{Schema: "billing"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(script[:strings.Index(script, "\n")])
	// Output:
	// -- outboxkit migrations (up) for schema "billing", table "outbox_events".
}
