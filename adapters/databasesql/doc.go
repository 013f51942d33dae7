// Package databasesql holds no code of its own: it is where outboxkit's
// database/sql support is proven.
//
// The support itself is in package postgres, which imports only the
// standard library's database/sql for it: postgres.New, NewDeduper,
// NewSequencer, NewInbox and Migrate take a *sql.DB as they take a
// *pgxpool.Pool (postgres.Handle), and postgres.SQL adapts a *sql.Tx (or
// *sql.DB, *sql.Conn, *sqlx.Tx, GORM's or bun's transaction) to the pgx
// types Add, OnceTx and OnceInOrderTx take:
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", id, total); err != nil {
//		return err
//	}
//	if err := store.Add(ctx, postgres.SQL(tx), event); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// This module's tests run the store, fault, deduper and sequencer
// conformance suites of core/coretest through database/sql with both
// drivers teams use, lib/pq and pgx's stdlib, against a real PostgreSQL:
// the events written through a *sql.Tx, the relay's claims and
// settlements through a *sql.DB. They live in a module of their own so
// that the root module does not require lib/pq.
//
// docs/DATABASES.md shows the same for sqlx, GORM, bun, ent and sqlc.
package databasesql
