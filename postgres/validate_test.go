package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Compile-time proof that the usual pgx handles all satisfy DBTX.
var (
	_ postgres.DBTX = (pgx.Tx)(nil)
	_ postgres.DBTX = (*pgx.Conn)(nil)
	_ postgres.DBTX = (*pgxpool.Pool)(nil)
	_ postgres.DBTX = (*pgxpool.Conn)(nil)
)

func TestInvalidIdentifiersAreRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	canary := pgtest.Schema(t, pool, "canary")
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %q.x (n int)", canary)); err != nil {
		t.Fatal(err)
	}
	// (An empty name means the default, so it is not among these.)
	bad := []string{
		canary + "; DROP TABLE " + canary + ".x",
		"public; DROP TABLE x",
		`"quoted"`,
		`a"b`,
		"1starts_with_digit",
		"has space",
		"dash-ed",
		"dot.ted",
		"ünicode",
		"tab\there",
		strings.Repeat("a", 64),
	}
	for _, name := range bad {
		checks := map[string]error{}
		_, checks["New schema"] = postgres.New(pool, &postgres.Config{Schema: name})
		_, checks["NewDeduper schema"] = postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: name})
		_, checks["NewMigrator schema"] = postgres.NewMigrator(pool, &postgres.MigrateConfig{Schema: name})
		_, checks["MigrationSQL schema"] = postgres.MigrationSQL(&postgres.MigrateConfig{Schema: name})
		checks["Migrate schema"] = postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: name})
		_, checks["New table"] = postgres.New(pool, &postgres.Config{Table: name})
		checks["Migrate table"] = postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: canary, Table: name})
		for what, err := range checks {
			var idErr *postgres.IdentifierError
			if !errors.Is(err, postgres.ErrInvalidIdentifier) || !errors.Is(err, core.ErrInvalidConfig) || !errors.As(err, &idErr) {
				t.Fatalf("%s %q: err = %v, want an *IdentifierError", what, name, err)
			}
			if idErr.Name != name || !strings.Contains(err.Error(), fmt.Sprintf("%q is not a valid identifier", name)) {
				t.Fatalf("%s %q: message %q does not name the value", what, name, err)
			}
		}
	}
	var created int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname::text = ANY($1::text[])", bad).Scan(&created); err != nil || created != 0 {
		t.Fatalf("refused names created %d schemas (%v)", created, err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", fmt.Sprintf("%q.x", canary)).Scan(&exists); err != nil || !exists {
		t.Fatalf("canary table is gone (%v): an injection got through", err)
	}

	// The message the issue asks for, word for word.
	_, err := postgres.New(pool, &postgres.Config{Schema: "public; DROP TABLE x"})
	if want := `schema name "public; DROP TABLE x" is not a valid identifier: use letters, digits and underscores`; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
	// Table names leave room for the names derived from them.
	if _, err := postgres.New(pool, &postgres.Config{Table: strings.Repeat("t", 41)}); !errors.Is(err, postgres.ErrInvalidIdentifier) {
		t.Fatalf("41-byte table name: err = %v, want ErrInvalidIdentifier", err)
	}
	// Valid edge cases are accepted.
	for _, cfg := range []postgres.Config{
		{Schema: strings.Repeat("s", 63)}, {Schema: "_x"}, {Schema: "Mixed_Case9"}, {Table: strings.Repeat("t", 40)},
	} {
		if _, err := postgres.New(pool, &cfg); err != nil {
			t.Fatalf("%+v refused: %v", cfg, err)
		}
	}
	if _, err := postgres.New(pool, &postgres.Config{Channel: strings.Repeat("c", 64)}); !errors.Is(err, postgres.ErrInvalidIdentifier) {
		t.Fatalf("64-byte channel: err = %v", err)
	}
	if _, err := postgres.New((*pgxpool.Pool)(nil), nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("nil pool: err = %v, want ErrInvalidConfig", err)
	}
}

func TestInvalidEventsWriteNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{MaxPayloadBytes: 64})
	ctx := ctxT(t)

	good := mustEvent(t, "good", map[string]int{"a": 1})
	withPayload := func(p string) core.Event {
		e := mustEvent(t, "bad", 1)
		e.Payload = []byte(p)
		return e
	}
	badHeader := mustEvent(t, "bad", 1)
	badHeader.Headers = map[string]string{"bad name": "x"}
	cases := []struct {
		name  string
		event core.Event
		field string
		is    error
	}{
		{"non-JSON payload", withPayload(`{"a":`), "Payload", core.ErrInvalidEvent},
		{"text payload", withPayload(`hello`), "Payload", core.ErrInvalidEvent},
		{"oversized payload", withPayload(`"` + strings.Repeat("x", 100) + `"`), "Payload", core.ErrPayloadTooLarge},
		{"NUL escape", withPayload(`{"a":"x\u0000y"}`), "Payload", core.ErrInvalidEvent},
		{"duplicate ID in one call", good, "ID", core.ErrInvalidEvent},
		{"empty type", core.Event{ID: core.NewID(), Payload: []byte(`{}`)}, "Type", core.ErrInvalidEvent},
		{"nil ID", core.Event{Type: "x", Payload: []byte(`{}`)}, "ID", core.ErrInvalidID},
		{"bad header", badHeader, "Headers", core.ErrInvalidEvent},
	}
	for _, c := range cases {
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add(ctx, tx, good, c.event)
		var ve *core.ValidationError
		if !errors.Is(err, c.is) || !errors.Is(err, core.ErrInvalidEvent) || !errors.As(err, &ve) || ve.Field != c.field {
			t.Fatalf("%s: err = %v, want a ValidationError on %s matching %v", c.name, err, c.field, c.is)
		}
		// Validation happens before anything is sent, so the caller's
		// transaction is still usable and commits nothing of the batch.
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("%s: the caller's transaction was aborted: %v", c.name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db, "true"); n != 0 {
		t.Fatalf("%d rows written by refused batches", n)
	}

	// An escaped backslash followed by "u0000" is not a NUL and is stored.
	ok := withPayload(`{"path":"C:\\u0000"}`)
	if err := addTx(ctx, s, db.pool, ok); err != nil {
		t.Fatalf("escaped backslash refused: %v", err)
	}
	// Writing an ID twice is refused by the database, with a sentinel.
	err := addTx(ctx, s, db.pool, ok)
	var pgErr *pgconn.PgError
	if !errors.Is(err, postgres.ErrDuplicateEvent) || !errors.As(err, &pgErr) {
		t.Fatalf("duplicate ID: err = %v, want ErrDuplicateEvent wrapping the PgError", err)
	}
	// No limit when MaxPayloadBytes is negative.
	unlimited := newStore(t, db, postgres.Config{MaxPayloadBytes: -1})
	if err := addTx(ctx, unlimited, db.pool, withPayload(`"`+strings.Repeat("x", 2<<20)+`"`)); err != nil {
		t.Fatalf("2 MiB payload with no limit: %v", err)
	}
	// The default limit is 1 MiB.
	def := newStore(t, db, postgres.Config{})
	if err := addTx(ctx, def, db.pool, withPayload(`"`+strings.Repeat("x", 1<<20)+`"`)); !errors.Is(err, core.ErrPayloadTooLarge) {
		t.Fatalf("payload over 1 MiB with the default limit: err = %v", err)
	}
	if def.Config().MaxPayloadBytes != 1<<20 {
		t.Fatalf("default MaxPayloadBytes = %d", def.Config().MaxPayloadBytes)
	}
}

func TestUnmigratedSchemaSaysSo(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	schema := pgtest.Schema(t, pool, "empty")
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := s.Add(ctx, pool, mustEvent(t, "x", 1)); !errors.Is(err, postgres.ErrNotMigrated) {
		t.Fatalf("Add on an empty schema: err = %v, want ErrNotMigrated", err)
	}
	if _, err := s.Claim(ctx, core.ClaimRequest{Limit: 1, LeaseFor: 1e9}); !errors.Is(err, postgres.ErrNotMigrated) {
		t.Fatalf("Claim on an empty schema: err = %v, want ErrNotMigrated", err)
	}
}
