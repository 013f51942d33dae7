package ormtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/outboxkit/outboxkit/adapters/ormtest/internal/ent"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// sqlx: a *sqlx.Tx is a *sql.Tx, so postgres.SQL takes it as it is.
func Example_sqlx() {
	ctx := context.Background()
	url, schema, done := exampleSchema()
	defer done()
	db, err := sqlx.Open("postgres", url) // lib/pq; "pgx" works alike
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total bigint NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	// Once, at start-up (or `outboxctl migrate`): the outbox's tables.
	if err := postgres.Migrate(ctx, db.DB, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	store, err := postgres.New(db.DB, &postgres.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}

	// In the request: the order and its event commit together or not at all.
	err = func() error {
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
		o := order{ID: "o-1", Total: 1250}
		if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id, total) VALUES (:id, :total)`, o); err != nil {
			return err
		}
		e, err := core.NewEvent("order.placed", map[string]any{"id": o.ID, "total": o.Total})
		if err != nil {
			return err
		}
		if err := store.Add(ctx, postgres.SQL(tx), e); err != nil {
			return err
		}
		return tx.Commit()
	}()
	if err != nil {
		fmt.Println(err)
		return
	}

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

// sqlx, consuming: the Deduper on the *sql.DB hands the effect a *sql.Tx;
// inside a *sqlx.Tx of yours, OnceTx hands it that *sqlx.Tx.
func Example_sqlxEffect() {
	ctx := context.Background()
	url, schema, done := exampleSchema()
	defer done()
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (id text PRIMARY KEY, order_id text NOT NULL, cents bigint NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}
	if err := postgres.Migrate(ctx, db.DB, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	dedup, err := postgres.NewDeduper(db.DB, &postgres.DeduperConfig{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}

	const insert = `INSERT INTO invoices (id, order_id, cents) VALUES (:id, :order_id, :cents)`
	h := core.Idempotent(dedup, "invoicing")(postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
		var inv invoice
		if err := json.Unmarshal(e.Payload, &inv); err != nil {
			return core.Permanent(err)
		}
		inv.ID = e.ID.String()
		query, args, err := db.BindNamed(insert, inv) // sqlx binds, the Deduper's *sql.Tx runs it
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, query, args...)
		return err
	}))

	e, err := core.NewEvent("order.paid", map[string]any{"order_id": "o-1", "cents": 1250})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 { // delivered twice, applied once
		if err := h.Handle(ctx, e); err != nil {
			fmt.Println(err)
			return
		}
	}

	// In a transaction of your own: OnceTx, in a savepoint of it.
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	e2, err := core.NewEvent("order.paid", map[string]any{"order_id": "o-2", "cents": 99})
	if err != nil {
		fmt.Println(err)
		return
	}
	applied, err := dedup.OnceTx(ctx, postgres.SQL(tx), core.DedupeKey{Consumer: "invoicing", EventID: e2.ID}, func(ctx context.Context) error {
		_, err := tx.NamedExecContext(ctx, insert, invoice{ID: e2.ID.String(), OrderID: "o-2", Cents: 99})
		return err
	})
	if err == nil {
		err = tx.Commit()
	}
	var n int
	if err == nil {
		err = db.GetContext(ctx, &n, `SELECT count(*) FROM invoices`)
	}
	fmt.Println("applied:", applied, "invoices:", n, err)
	// Output:
	// applied: true invoices: 2 <nil>
}

// ent: generated with --feature sql/execquery, *ent.Tx has ExecContext
// and QueryContext, so postgres.SQL takes it as it is.
func Example_ent() {
	ctx := context.Background()
	url, schema, done := exampleSchema()
	defer done()
	db, err := sql.Open("pgx", url) // pgx's stdlib; lib/pq's "postgres" works alike
	if err != nil {
		fmt.Println(err)
		return
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	defer client.Close()
	if err := client.Schema.Create(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := postgres.Migrate(ctx, db, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	store, err := postgres.New(db, &postgres.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}

	// In the request: the order and its event commit together or not at all.
	err = func() error {
		tx, err := client.Tx(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
		if err := tx.Order.Create().SetID("o-1").SetTotal(1250).Exec(ctx); err != nil {
			return err
		}
		e, err := core.NewEvent("order.placed", map[string]any{"id": "o-1", "total": 1250})
		if err != nil {
			return err
		}
		if err := store.Add(ctx, postgres.SQL(tx), e); err != nil {
			return err
		}
		return tx.Commit()
	}()
	if err != nil {
		fmt.Println(err)
		return
	}

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

// ent, consuming: the Deduper on the *sql.DB hands the effect a *sql.Tx,
// on which entClient opens a client; inside an *ent.Tx of yours, OnceTx
// hands it that *ent.Tx.
func Example_entEffect() {
	ctx := context.Background()
	url, schema, done := exampleSchema()
	defer done()
	db, err := sql.Open("pgx", url)
	if err != nil {
		fmt.Println(err)
		return
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	defer client.Close()
	if err := client.Schema.Create(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := postgres.Migrate(ctx, db, &postgres.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	dedup, err := postgres.NewDeduper(db, &postgres.DeduperConfig{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}

	h := core.Idempotent(dedup, "invoicing")(postgres.SQLEffect(func(ctx context.Context, tx *sql.Tx, e core.Event) error {
		var p struct {
			OrderID string `json:"order_id"`
			Cents   int64  `json:"cents"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return core.Permanent(err)
		}
		return entClient(tx).Invoice.Create().SetID(e.ID.String()).SetOrderID(p.OrderID).SetCents(p.Cents).Exec(ctx)
	}))

	e, err := core.NewEvent("order.paid", map[string]any{"order_id": "o-1", "cents": 1250})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 { // delivered twice, applied once
		if err := h.Handle(ctx, e); err != nil {
			fmt.Println(err)
			return
		}
	}

	// In a transaction of your own: OnceTx, in a savepoint of it.
	tx, err := client.Tx(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	e2, err := core.NewEvent("order.paid", map[string]any{"order_id": "o-2", "cents": 99})
	if err != nil {
		fmt.Println(err)
		return
	}
	applied, err := dedup.OnceTx(ctx, postgres.SQL(tx), core.DedupeKey{Consumer: "invoicing", EventID: e2.ID}, func(ctx context.Context) error {
		return tx.Invoice.Create().SetID(e2.ID.String()).SetOrderID("o-2").SetCents(99).Exec(ctx)
	})
	if err == nil {
		err = tx.Commit()
	}
	var n int
	if err == nil {
		n, err = client.Invoice.Query().Count(ctx)
	}
	fmt.Println("applied:", applied, "invoices:", n, err)
	// Output:
	// applied: true invoices: 2 <nil>
}

// entClient returns an ent client whose statements run in tx, the
// transaction a Deduper or Sequencer on a *sql.DB hands an effect. The
// mutations ent wraps in a transaction of their own (UpdateOne, edges)
// run in tx as they are, as they do in an *ent.Tx. Do not Close the
// client: tx belongs to the Deduper.
func entClient(tx *sql.Tx) *ent.Client {
	return ent.NewClient(ent.Driver(inTx{entsql.NewDriver(dialect.Postgres, entsql.Conn{ExecQuerier: tx})}))
}

// inTx is an ent driver already in a transaction: its Tx begins nothing.
type inTx struct{ *entsql.Driver }

func (d inTx) Tx(context.Context) (dialect.Tx, error) { return dialect.NopTx(d), nil }

// printer is a publisher that prints what it is given.
func printer() core.Publisher {
	return core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		for _, e := range events {
			fmt.Printf("published %s %s\n", e.Type, e.Payload)
		}
		return nil
	})
}

// exampleSchema makes a throwaway schema and returns DATABASE_URL with it
// as the search path; done drops it. A real program connects to its own
// database and schema.
func exampleSchema() (dsn, schema string, done func()) {
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
	return u.String(), schema, func() {
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		// The migrations' publication belongs to the database, not the schema.
		_, _ = admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{"outboxkit." + schema + ".outbox_events"}.Sanitize())
		_ = admin.Close(ctx)
	}
}
