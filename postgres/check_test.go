package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	m, err := postgres.NewMigrator((*pgxpool.Pool)(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	latest := len(m.Migrations())

	t.Run("healthy", func(t *testing.T) {
		t.Parallel()
		// Its own: a parallel subtest may start long after its parent.
		ctx := ctxT(t)
		db := newDB(t, 1)
		if err := newStore(t, db, postgres.Config{}).Check(ctx); err != nil {
			t.Fatalf("Check on a migrated schema: %v", err)
		}
	})

	t.Run("missing schema", func(t *testing.T) {
		t.Parallel()
		// Its own: a parallel subtest may start long after its parent.
		ctx := ctxT(t)
		pool := pgtest.Pool(t, 1)
		s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchemaName("nosuch")})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Check(ctx)
		var se *postgres.SchemaError
		if !errors.Is(err, postgres.ErrNotMigrated) || !errors.As(err, &se) || se.Version != 0 || se.Want != latest {
			t.Fatalf("Check on a missing schema: %v, want a SchemaError at version 0 matching ErrNotMigrated", err)
		}
		for _, want := range []string{"has no outbox tables", "postgres.Migrate", "outboxctl migrate"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		// The relay refuses to start on it, saying why.
		r, err := core.NewRelay(s, memory.NewPublisher(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); !errors.Is(err, postgres.ErrNotMigrated) {
			t.Fatalf("Relay.Run on a missing schema: %v, want the check's error", err)
		}
	})

	t.Run("migrated down one step", func(t *testing.T) {
		t.Parallel()
		// Its own: a parallel subtest may start long after its parent.
		ctx := ctxT(t)
		db := newDB(t, 1)
		m, err := postgres.NewMigrator(db.pool, &postgres.MigrateConfig{Schema: db.schema})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Down(ctx, latest-1); err != nil {
			t.Fatal(err)
		}
		err = newStore(t, db, postgres.Config{}).Check(ctx)
		var se *postgres.SchemaError
		if !errors.Is(err, postgres.ErrNotMigrated) || !errors.As(err, &se) || se.Version != latest-1 || se.Want != latest {
			t.Fatalf("Check one migration behind: %v, want a SchemaError at version %d of %d", err, latest-1, latest)
		}
		if want := "this build needs"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "postgres.Migrate") {
			t.Errorf("error %q does not say %q and what to run", err, want)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		if err := newStore(t, db, postgres.Config{}).Check(ctx); err != nil {
			t.Fatalf("Check after migrating up again: %v", err)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		// Its own: a parallel subtest may start long after its parent.
		ctx := ctxT(t)
		// A port nothing listens on: dialing is refused at once.
		cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		s, err := postgres.New(pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err = s.Check(cctx)
		if err == nil || errors.Is(err, postgres.ErrNotMigrated) || !strings.Contains(err.Error(), "did not answer") {
			t.Fatalf("Check on an unreachable database: %v, want an error saying the database did not answer", err)
		}
	})
}

// TestLoggersDefaultToSlogDefault: without a Logger, the store and the
// migrator write warnings (and only those) through slog.Default(), looked
// up when they log. Not parallel: it replaces the process's default
// logger while it runs, before the parallel tests start.
func TestLoggersDefaultToSlogDefault(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))

	pool := pgtest.Pool(t, 1)
	s, err := postgres.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*slog.Logger{
		"Config":        s.Config().Logger,
		"MigrateConfig": postgres.MigrateConfig{}.WithDefaults().Logger,
	} {
		buf.Reset()
		l.Info("quiet")
		l.Warn("loud")
		if out := buf.String(); !strings.Contains(out, "msg=loud") || strings.Contains(out, "quiet") {
			t.Errorf("%s's default logger wrote %q, want the warning only, through slog.Default()", name, out)
		}
	}
}
