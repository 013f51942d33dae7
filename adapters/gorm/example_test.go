package outboxgorm_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	outboxgorm "github.com/outboxkit/outboxkit/adapters/gorm"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Order and Invoice are the examples' business rows (and the tests'): GORM
// maps them to the tables orders and invoices.
type Order struct {
	ID    string `gorm:"primaryKey"`
	Total int64
}

type Invoice struct {
	ID      string `gorm:"primaryKey"` // the ID of the event that made it
	OrderID string
	Cents   int64
}

// Write an order and its event in one GORM transaction, then relay the
// event.
func Example() {
	ctx := context.Background()
	db, sqlDB, schema, done := exampleDB()
	defer done()

	// Once, at start-up (or `outboxctl migrate`): the outbox's tables.
	if err := postgres.Migrate(ctx, sqlDB, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	store, err := postgres.New(sqlDB, &postgres.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}

	// In the request: the order and its event commit together or not at all.
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Order{ID: "o-1", Total: 1250}).Error; err != nil {
			return err
		}
		e, err := core.NewEvent("order.placed", map[string]any{"id": "o-1", "total": 1250})
		if err != nil {
			return err
		}
		return outboxgorm.Add(ctx, store, tx, e)
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	// A relay publishes it: here once, to standard output.
	relay, err := core.NewRelay(store, printer(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := relay.Drain(ctx)
	fmt.Println("settled", n, err)
	// Output:
	// published order.placed {"id": "o-1", "total": 1250}
	// settled 1 <nil>
}

// Apply an event's effect once, written with GORM in the Deduper's
// transaction: the second delivery of the event changes nothing.
func ExampleEffect() {
	ctx := context.Background()
	db, sqlDB, schema, done := exampleDB()
	defer done()
	if err := postgres.Migrate(ctx, sqlDB, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}

	dedup, err := postgres.NewDeduper(sqlDB, &postgres.DeduperConfig{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	invoice := outboxgorm.Effect(db, func(ctx context.Context, tx *gorm.DB, e core.Event) error {
		var p struct {
			OrderID string `json:"order_id"`
			Cents   int64  `json:"cents"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return core.Permanent(err) // redelivering it would not help
		}
		return tx.Create(&Invoice{ID: e.ID.String(), OrderID: p.OrderID, Cents: p.Cents}).Error
	})
	// A receiver (qstash.ReceiverConfig{Handler: mux, Deduper: dedup}) or
	// a Watermill handler runs it through the Deduper; so does Idempotent.
	h := core.Idempotent(dedup, "invoicing")(invoice)

	e, err := core.NewEvent("order.paid", map[string]any{"order_id": "o-1", "cents": 1250})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 { // the transport delivers it twice
		if err := h.Handle(ctx, e); err != nil {
			fmt.Println(err)
			return
		}
	}
	var n int64
	err = db.Model(&Invoice{}).Count(&n).Error
	fmt.Println("invoices:", n, err)
	// Output:
	// invoices: 1 <nil>
}

// Apply an event inside a GORM transaction you already hold: OnceTx runs
// the effect in a savepoint of it, and a duplicate leaves the rest of the
// transaction to commit.
func ExampleTx() {
	ctx := context.Background()
	db, sqlDB, schema, done := exampleDB()
	defer done()
	if err := postgres.Migrate(ctx, sqlDB, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	dedup, err := postgres.NewDeduper(sqlDB, &postgres.DeduperConfig{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := core.NewEvent("order.paid", map[string]any{"order_id": "o-1", "cents": 1250})
	if err != nil {
		fmt.Println(err)
		return
	}

	for range 2 { // the same event, delivered twice
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			// ... the transaction's other work goes here, through tx ...
			conn, err := outboxgorm.Tx(tx)
			if err != nil {
				return err
			}
			key := core.DedupeKey{Consumer: "invoicing", EventID: e.ID}
			applied, err := dedup.OnceTx(ctx, conn, key, func(ctx context.Context) error {
				return tx.Create(&Invoice{ID: e.ID.String(), OrderID: "o-1", Cents: 1250}).Error
			})
			fmt.Println("applied:", applied)
			return err
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	// Output:
	// applied: true
	// applied: false
}

// printer is a publisher that prints what it is given.
func printer() core.Publisher {
	return core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		for _, e := range events {
			fmt.Printf("published %s %s\n", e.Type, e.Payload)
		}
		return nil
	})
}

// exampleDB opens GORM on a throwaway schema, with the business tables
// created by AutoMigrate; done closes it and drops the schema. A real
// program connects to its own database and schema.
func exampleDB() (db *gorm.DB, sqlDB *sql.DB, schema string, done func()) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		panic(err)
	}
	schema = pgtest.NewSchemaName("example")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		panic(err)
	}
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	db, err = gorm.Open(gormpg.Open(u.String()), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err == nil {
		sqlDB, err = db.DB()
	}
	if err == nil {
		err = db.AutoMigrate(&Order{}, &Invoice{})
	}
	if err != nil {
		panic(err)
	}
	return db, sqlDB, schema, func() {
		_ = sqlDB.Close()
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		// The migrations' publication belongs to the database, not the schema.
		_, _ = admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{"outboxkit." + schema + ".outbox_events"}.Sanitize())
		_ = admin.Close(ctx)
	}
}
