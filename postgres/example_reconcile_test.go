package postgres_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// exampleSchema makes a throwaway migrated schema; a real program uses its
// own. The returned function drops it.
func exampleSchema(ctx context.Context, pool *pgxpool.Pool) (string, func(), error) {
	schema := pgtest.NewSchemaName("example")
	drop := func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		_, _ = pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{"outboxkit." + schema + ".outbox_events"}.Sanitize())
	}
	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		drop()
		return "", nil, err
	}
	return schema, drop, nil
}

// Check that consumer "billing" applied every event the outbox published:
// here two of three, and it holds a record of an event the outbox never
// had.
func ExampleReconcile() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	schema, drop, err := exampleSchema(ctx, pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	placed, paid, shipped, phantom := core.NewID(), core.NewID(), core.NewID(), core.NewID()
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+` (id, event_type, payload, published_at) VALUES
    ($1, 'order.placed', '{}', now() - interval '1 hour'),
    ($2, 'order.paid', '{}', now() - interval '1 hour'),
    ($3, 'order.shipped', '{}', now() - interval '1 hour')`, placed.String(), paid.String(), shipped.String())
	if err == nil {
		_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "outbox_events_processed"}.Sanitize()+` (consumer, event_id)
VALUES ('billing', $1), ('billing', $2), ('billing', $3)`, placed.String(), paid.String(), phantom.String())
	}
	if err != nil {
		fmt.Println(err)
		return
	}

	// The consumer's records may be in another database: pass its pool
	// as the third argument.
	rep, err := postgres.Reconcile(ctx, pool, pool, &postgres.ReconcileConfig{Schema: schema, Consumer: "billing"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("published %d, applied %d, missing %d, phantoms %d\n", rep.Published, rep.Applied, rep.Missing, rep.Phantoms)
	fmt.Println("missing order.shipped:", rep.MissingEvents[0].ID == shipped)
	fmt.Println("phantom record:", rep.PhantomRecords[0].EventID == phantom)
	// Output:
	// published 3, applied 2, missing 1, phantoms 1
	// missing order.shipped: true
	// phantom record: true
}

// Run the checks a readiness probe can afford (catalogs and statistics
// only) and decide from the worst finding.
func ExampleDoctor() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	schema, drop, err := exampleSchema(ctx, pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	// The pending index, which every claim walks, is gone.
	if _, err := pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{schema, "outbox_events_pending_idx"}.Sanitize()); err != nil {
		fmt.Println(err)
		return
	}

	rep, err := postgres.Doctor(ctx, pool, &postgres.DoctorConfig{
		Schema: schema,
		// postgres.CheapChecks() in a readiness probe; these two here,
		// whose findings do not depend on the rest of the server.
		Checks: []string{postgres.CheckMigrations, postgres.CheckIndexes},
	})
	if err != nil {
		fmt.Println(err) // the database did not answer
		return
	}
	for _, f := range rep.AtLeast(postgres.SeverityWarning) {
		fmt.Printf("[%s] %s\n", f.Severity, f.Check)
	}
	fmt.Println("ready:", rep.Worst() < postgres.SeverityCritical)
	// Output:
	// [critical] indexes
	// ready: false
}
