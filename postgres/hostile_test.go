package postgres_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// hostileRows are rows a foreign writer can insert with plain SQL, each
// with the fate the relay must give it: "published", "dead" (dead-lettered
// by the claim, with a reason naming the column) or "invalid"
// (dead-lettered by the relay's validation). They are the oldest due rows,
// so a claim that fails on any of them fails for every row behind it.
var hostileRows = []struct {
	typ  string
	set  map[string]string // column: SQL value
	fate string
}{
	{"max.attempts", map[string]string{"attempts": "2147483647"}, "dead"},
	{"near.max.attempts", map[string]string{"attempts": "2147483646"}, "published"},
	{"due.minus.infinity", map[string]string{"available_at": "'-infinity'"}, "published"},
	{"created.infinity", map[string]string{"created_at": "'infinity'"}, "published"},
	{"created.minus.infinity", map[string]string{"created_at": "'-infinity'"}, "published"},
	{"negative.version", map[string]string{"schema_version": "-1"}, "invalid"},
	{"huge.version", map[string]string{"schema_version": "2147483647"}, "published"},
	{"null.payload", map[string]string{"payload": "'null'"}, "published"},
	{"scalar.payload", map[string]string{"payload": `'"text"'`}, "published"},
	{"huge.number.payload", map[string]string{"payload": "'1e1000'"}, "published"},
	{"odd.headers", map[string]string{"headers": `'{"n": 1, "o": {"a": [1, 2]}, "x": null}'`}, "published"},
	{"negative.pos", map[string]string{"pos": "-9223372036854775808"}, "published"},
	{"huge.pos", map[string]string{"pos": "9223372036854775807"}, "published"},
	{"", nil, "invalid"},
	// Aggregates, for ordering: A's head cannot be leased, C's is invalid;
	// both must be dead-lettered for the rest of their aggregate to flow.
	{"A.1", map[string]string{"aggregate_type": "'order'", "aggregate_id": "'A'", "sequence": "1", "attempts": "2147483647"}, "dead"},
	{"A.2", map[string]string{"aggregate_type": "'order'", "aggregate_id": "'A'", "sequence": "2"}, "published"},
	{"B.max", map[string]string{"aggregate_type": "'order'", "aggregate_id": "'B'", "sequence": "9223372036854775807"}, "published"},
	{"C.-1", map[string]string{"aggregate_type": "'order'", "aggregate_id": "'C'", "sequence": "-1"}, "invalid"},
	{"C.5", map[string]string{"aggregate_type": "'order'", "aggregate_id": "'C'", "sequence": "5"}, "published"},
}

// TestHostileRowsDoNotStallTheRelay: no row's values may make a claim fail
// for the others. Each hostile row is dead-lettered, by the claim or by the
// relay, or published; healthy rows behind them all flow.
func TestHostileRowsDoNotStallTheRelay(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		for _, batch := range []int{1, 3, 100} {
			t.Run(fmt.Sprintf("ordering=%v/batch=%d", ordered, batch), func(t *testing.T) {
				t.Parallel()
				hostileRowsFlow(t, ordered, batch)
			})
		}
	}
}

func hostileRowsFlow(t *testing.T, ordered bool, batch int) {
	db := newDB(t, 2)
	ctx := ctxT(t)
	tbl := pgx.Identifier{db.schema, "outbox_events"}.Sanitize()
	for i, r := range hostileRows {
		// Oldest first, a second apart, so the hostile rows head the queue
		// in this order (unless they set available_at themselves).
		at := fmt.Sprintf("now() - interval '1 day' + %d * interval '1 second'", i)
		set := map[string]string{"event_type": "$1", "payload": `'{"n": 1}'`, "created_at": at, "available_at": at}
		for c, v := range r.set {
			set[c] = v
		}
		var cols, vals []string
		for c, v := range set {
			cols, vals = append(cols, c), append(vals, v)
		}
		q := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", tbl, strings.Join(cols, ", "), strings.Join(vals, ", "))
		if _, err := db.pool.Exec(ctx, q, r.typ); err != nil {
			t.Fatalf("insert hostile row %q: %v\n%s", r.typ, err, q)
		}
	}
	const healthy = 10
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+tbl+` (event_type, payload) SELECT 'healthy', '{}' FROM generate_series(1, $1::int)`, healthy); err != nil {
		t.Fatal(err)
	}

	s := newStore(t, db, postgres.Config{Ordering: ordered, Notify: postgres.NotifyOff})
	// The first claim faces the oldest row, the one it cannot lease: it
	// must succeed, and still hand out a full batch of what else is due.
	first, err := s.Claim(ctx, core.ClaimRequest{Limit: batch, LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("claim with hostile rows at the head of the queue: %v", err)
	}
	// Due: every row but the two the claim dead-letters and, with
	// ordering, C.5 behind C's head. (A.2 is due once A's head is
	// dead-lettered, which the same Claim call sees.)
	due := len(hostileRows) + healthy - 2
	if ordered {
		due--
	}
	if want := min(batch, due); len(first.Events) != want {
		t.Fatalf("first claim: %d events, want %d (a row the claim dead-letters must not shorten the batch)", len(first.Events), want)
	}
	for _, e := range first.Events {
		if e.Type == "max.attempts" || e.Type == "A.1" {
			t.Fatalf("the claim handed out %q, whose attempts cannot be counted", e.Type)
		}
	}
	release := make([]core.Outcome, len(first.Events))
	for i, e := range first.Events {
		release[i] = core.Outcome{ID: e.ID, Kind: core.Released}
	}
	if err := s.Settle(ctx, core.SettleRequest{Lease: first.Lease, Outcomes: release}); err != nil {
		t.Fatal(err)
	}

	pub := memory.NewPublisher()
	// The relay logs each batch it dead-letters events of, at error level.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	relay, err := core.NewRelay(s, pub, &core.RelayConfig{BatchSize: batch, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// Each Drain stops at an event it retried or at a short batch; with
	// ordering, an aggregate moves one head per claim.
	for i := 0; i < 50 && count(t, db, "published_at IS NULL AND dead_at IS NULL") > 0; i++ {
		if _, err := relay.Drain(ctx); err != nil {
			t.Fatalf("Drain %d: %v", i, err)
		}
	}
	if n := count(t, db, "published_at IS NULL AND dead_at IS NULL"); n != 0 {
		t.Fatalf("%d rows still pending", n)
	}

	got := map[string]string{}
	rows, err := db.pool.Query(ctx, `SELECT event_type, CASE WHEN published_at IS NOT NULL THEN 'published' ELSE 'dead' END, COALESCE(last_error, '') FROM `+tbl)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	publishedHealthy := 0
	for rows.Next() {
		var typ, fate, reason string
		if err := rows.Scan(&typ, &fate, &reason); err != nil {
			t.Fatal(err)
		}
		if typ == "healthy" {
			if fate == "published" {
				publishedHealthy++
			}
			continue
		}
		got[typ], reasons[typ] = fate, reason
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if publishedHealthy != healthy {
		t.Errorf("%d of %d healthy rows published", publishedHealthy, healthy)
	}
	var bad []string
	for _, r := range hostileRows {
		want := r.fate
		if want == "invalid" {
			want = "dead"
		}
		if got[r.typ] != want {
			bad = append(bad, fmt.Sprintf("%q: %s, want %s (last_error %q)", r.typ, got[r.typ], r.fate, reasons[r.typ]))
		}
		if r.fate == "dead" && !strings.Contains(reasons[r.typ], "attempts") {
			bad = append(bad, fmt.Sprintf("%q: dead-lettered with reason %q, want one naming the attempts column", r.typ, reasons[r.typ]))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	// Each publishable event was published once.
	seen := map[core.ID]int{}
	for _, e := range pub.Published() {
		seen[e.ID]++
		if seen[e.ID] > 1 {
			t.Errorf("event %s (%q) published %d times", e.ID, e.Type, seen[e.ID])
		}
	}
}

// TestNegativeAttemptsAreRepairedAndRefused: a negative attempts count,
// which only a foreign writer can store, used to buy its event extra
// retries. Migration 006 starts existing ones at 0 and refuses new ones;
// the claim counts from 0 whatever the row holds.
func TestNegativeAttemptsAreRepairedAndRefused(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	tbl := pgx.Identifier{db.schema, "outbox_events"}.Sanitize()
	m, err := postgres.NewMigrator(db.pool, &postgres.MigrateConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, 5); err != nil {
		t.Fatal(err)
	}
	// Written before the migration.
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+tbl+` (event_type, payload, attempts) VALUES ('negative', '{}', -5), ('very.negative', '{}', -2147483648)`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up over rows with negative attempts: %v", err)
	}
	if n := count(t, db, "attempts < 0"); n != 0 {
		t.Fatalf("%d rows kept a negative attempts count through the migration", n)
	}
	var validated bool
	if err := db.pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint WHERE conrelid = $1::regclass AND conname = 'outbox_events_attempts_check'`, tbl).Scan(&validated); err != nil {
		t.Fatalf("the attempts check: %v", err)
	}
	if !validated {
		t.Fatal("the attempts check of a small table is not validated")
	}
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyOff})
	got := claimAll(t, s, nil)
	if len(got) != 2 || got[0].Attempts != 1 || got[1].Attempts != 1 {
		t.Fatalf("claimed %d events with attempts %v; want 2, each on its first attempt", len(got), attemptsOf(got))
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO `+tbl+` (event_type, payload, attempts) VALUES ('negative', '{}', -1)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("insert with negative attempts after the migration: %v, want a check violation", err)
	}
}

// TestAttemptsCheckOnALargeTableIsLeftToValidate: on a table too large to
// scan under the migration's lock, the check is added NOT VALID (enforced
// for every row written from then on) and the operator validates it later;
// the existing negative rows are repaired all the same, and validating
// succeeds.
func TestAttemptsCheckOnALargeTableIsLeftToValidate(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	tbl := pgx.Identifier{db.schema, "outbox_events"}.Sanitize()
	m, err := postgres.NewMigrator(db.pool, &postgres.MigrateConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, 5); err != nil {
		t.Fatal(err)
	}
	// Past the size limit with few rows: a low fillfactor and wide rows.
	for _, q := range []string{
		`ALTER TABLE ` + tbl + ` SET (fillfactor = 10)`,
		`INSERT INTO ` + tbl + ` (event_type, payload, published_at, source)
		SELECT 'history', '{}', now(), repeat('s', 600) FROM generate_series(1, 45000)`,
		`INSERT INTO ` + tbl + ` (event_type, payload, attempts) VALUES ('negative', '{}', -3)`,
	} {
		if _, err := db.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var size int64
	if err := db.pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, tbl).Scan(&size); err != nil {
		t.Fatal(err)
	}
	if size <= postgres.ValidateCheckMaxBytesForTest {
		t.Fatalf("table is %d bytes, not over the %d the migration validates under its lock: the test no longer exercises the large-table path", size, postgres.ValidateCheckMaxBytesForTest)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var validated bool
	if err := db.pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint WHERE conrelid = $1::regclass AND conname = 'outbox_events_attempts_check'`, tbl).Scan(&validated); err != nil {
		t.Fatal(err)
	}
	if validated {
		t.Fatal("the check was validated under the migration's lock on a large table")
	}
	if n := count(t, db, "attempts < 0"); n != 0 {
		t.Fatalf("%d rows kept a negative attempts count", n)
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+tbl+` (event_type, payload, attempts) VALUES ('negative', '{}', -1)`); err == nil {
		t.Fatal("a NOT VALID check let a new row with negative attempts in")
	}
	// What docs/SCHEMA.md tells operators to run.
	if _, err := db.pool.Exec(ctx, `ALTER TABLE `+tbl+` VALIDATE CONSTRAINT outbox_events_attempts_check`); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

func attemptsOf(evs []core.Event) []int {
	out := make([]int, len(evs))
	for i, e := range evs {
		out[i] = e.Attempts
	}
	return out
}
