package pgtest

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultBouncerURL is the PgBouncer CI starts (.ci/services.sh,
// ensure_pgbouncer): transaction mode, in front of the local server's
// database test.
const DefaultBouncerURL = "postgres://postgres@127.0.0.1:6432/test?sslmode=disable"

// BouncerURL returns OUTBOXKIT_PGBOUNCER_URL, or DefaultBouncerURL when it
// is unset. It must lead to the same database as URL(): tests write
// through one and check through the other.
func BouncerURL() string {
	if u := os.Getenv("OUTBOXKIT_PGBOUNCER_URL"); u != "" {
		return u
	}
	return DefaultBouncerURL
}

// BouncerURLWithMaxConns returns BouncerURL() with pool_max_conns set to
// n, for pools opened from a URL (postgres.NewPool): every parallel test's
// pool is one more set of PgBouncer clients, and PgBouncer's own pool to
// the server is small.
func BouncerURLWithMaxConns(tb testing.TB, n int) string {
	tb.Helper()
	u, err := url.Parse(BouncerURL())
	if err != nil {
		tb.Fatalf("pgtest: OUTBOXKIT_PGBOUNCER_URL must be a postgres:// URL: %s", redact(err.Error()))
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return u.String()
}

// RequireBouncer fails tb, with what to do, unless PgBouncer answers at
// BouncerURL(). Tests through PgBouncer never skip: CI installs and starts
// it, so a missing one is a broken environment, not an optional feature.
func RequireBouncer(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, BouncerURL())
	if err == nil {
		// The simple protocol: nothing PgBouncer could lose between
		// transactions.
		_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
		conn.Close(ctx)
	}
	if err != nil {
		tb.Fatalf("pgtest: PgBouncer at %s is unreachable (%s): run `bash .ci/services.sh` (CI's .ci/run does; it installs PgBouncer and starts it in transaction mode on 127.0.0.1:6432) or set OUTBOXKIT_PGBOUNCER_URL",
			redact(BouncerURL()), redactWith(err.Error(), BouncerURL()))
	}
}

// BouncerPool returns a pool through PgBouncer with pgx's defaults, closed
// when tb ends: its statements are prepared and cached per connection,
// which PgBouncer before 1.21 does not keep in transaction mode. It is
// what a user gets from pgxpool.New; tests of the store's own pool use
// postgres.NewPool on BouncerURLWithMaxConns.
func BouncerPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	RequireBouncer(tb)
	cfg, err := pgxpool.ParseConfig(BouncerURL())
	if err != nil {
		tb.Fatalf("pgtest: parse OUTBOXKIT_PGBOUNCER_URL: %s", redact(err.Error()))
	}
	if maxConns <= 0 {
		maxConns = 4
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: pool through PgBouncer at %s: %s", redact(BouncerURL()), redactWith(err.Error(), BouncerURL()))
	}
	tb.Cleanup(pool.Close)
	return pool
}

// BouncerOneServerURL is BouncerURL() with the database test_one_server,
// which the PgBouncer there must serve from a pool of one server
// connection (CI's does, ensure_pgbouncer): every client's transaction
// then runs on the same server session, so a test can make one client's
// prepared statements meet another's.
func BouncerOneServerURL(tb testing.TB) string {
	tb.Helper()
	u, err := url.Parse(BouncerURL())
	if err != nil {
		tb.Fatalf("pgtest: OUTBOXKIT_PGBOUNCER_URL must be a postgres:// URL: %s", redact(err.Error()))
	}
	u.Path = "/test_one_server"
	return u.String()
}
