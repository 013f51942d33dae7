// Package databases holds the snippets of docs/DATABASES.md: outboxkit in
// the transaction of database/sql, sqlx, GORM and bun, and a pool for
// PgBouncer. Each function is one snippet, compiled here and run by
// this package's tests against the real PostgreSQL; internal/repocheck
// fails when a snippet of the page is not, verbatim, in a compiled file.
//
// The snippets share two tables, created by the tests:
//
//	CREATE TABLE orders (id text PRIMARY KEY, cents bigint NOT NULL);
//	CREATE TABLE invoices (order_id text PRIMARY KEY, cents bigint NOT NULL);
package databases

// OrderPlaced is the event the snippets write.
type OrderPlaced struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}
