package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	// Aliased: this package's own redact wraps it.
	redaction "github.com/outboxkit/outboxkit/internal/redact"
)

// DefaultURL is the local server CI starts (trust authentication).
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns DATABASE_URL, or DefaultURL when it is unset.
func URL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Pool returns a pool on URL() closed when tb ends. maxConns bounds it (0
// means 8) so parallel test packages stay under the server's connection limit.
func Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		tb.Fatalf("pgtest: parse DATABASE_URL: %s", redact(err.Error()))
	}
	if maxConns <= 0 {
		maxConns = 8
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		tb.Fatalf("pgtest: PostgreSQL at %s is unreachable (%s): start it (CI's .ci/run does) or set DATABASE_URL", redact(URL()), redactWith(err.Error(), URL()))
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Schema creates a uniquely named, empty schema ("<prefix>_<random>") and
// drops it, with everything in it, when tb ends.
func Schema(tb testing.TB, pool *pgxpool.Pool, prefix string) string {
	tb.Helper()
	if strings.HasPrefix(strings.ToLower(prefix), "pg_") || strings.EqualFold(prefix, "pg") {
		// PostgreSQL reserves pg_* schema names for itself.
		tb.Fatalf("pgtest: schema prefix %q would make a reserved pg_* name: pick another", prefix)
	}
	name := NewSchemaName(prefix)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", name, err)
		}
		// Publications belong to the database: migration 7's
		// ("outboxkit.<schema>.<table>") outlive the schema.
		if err := dropPublications(context.Background(), pool, "outboxkit."+name+"."); err != nil {
			tb.Errorf("pgtest: drop the publications of schema %s: %v", name, err)
		}
	})
	return name
}

// dropPublications drops the publications whose names start with prefix.
func dropPublications(ctx context.Context, pool *pgxpool.Pool, prefix string) error {
	rows, err := pool.Query(ctx, "SELECT pubname FROM pg_publication WHERE starts_with(pubname, $1)", prefix)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{n}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// NewSchemaName returns "<prefix>_<8 random hex digits>", lower-case.
func NewSchemaName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(prefix) + "_" + hex.EncodeToString(b[:])
}

// redact hides the credentials of a database URL or connection string in a
// failure message; test logs are kept and shared like any other.
func redact(u string) string { return redaction.String(u, redaction.Secrets(u)...) }

// redactWith hides the credentials of conn wherever s quotes them: pgx's
// errors can echo parts of the connection string.
func redactWith(s, conn string) string { return redaction.String(s, redaction.Secrets(conn)...) }
