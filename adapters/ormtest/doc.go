// Package ormtest holds the integration tests of the data layers that need
// no adapter code: sqlx (its *sqlx.Tx embeds the *sql.Tx) and ent (its
// *ent.Tx, generated with the sql/execquery feature, has ExecContext and
// QueryContext). Both pass straight to postgres.SQL. The tests run the
// scenario of adapters/internal/ormsuite against the real PostgreSQL with
// lib/pq and with pgx's database/sql driver; example_test.go holds the
// snippets the documentation shows, compiled and run.
//
// It is a module of its own so that nothing else pulls in sqlx or ent, and
// it has nothing to import: the package is its tests.
package ormtest
