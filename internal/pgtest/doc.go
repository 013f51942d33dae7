// Package pgtest gives tests a real PostgreSQL: a small pool and a fresh
// schema per test (or per package), dropped when the test ends. Tests that
// need PostgreSQL fail, never skip, when it is unreachable: CI must run them.
//
//	pool := pgtest.Pool(t, 4)             // DATABASE_URL, or the local server
//	schema := pgtest.Schema(t, pool, "wm") // "wm_<random>", dropped at cleanup
//
// Pools stay small because every test package runs against one server with a
// limited number of connections.
//
// Tests through PgBouncer in transaction mode (CI starts it on
// 127.0.0.1:6432) take BouncerURL (OUTBOXKIT_PGBOUNCER_URL), or
// BouncerPool for a pool with pgx's defaults; they fail, never skip,
// when PgBouncer is not there (RequireBouncer).
package pgtest
