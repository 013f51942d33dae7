package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// claimTracer records the SQL and arguments of the claims a pool runs, so a
// test can EXPLAIN exactly what the store sent, whatever the statement's
// text or parameters.
type claimTracer struct {
	mu    sync.Mutex
	plain string // a claim's text, not by slot
	slot  string // a slot claim's text
	args  []any  // the latest claim's arguments
}

func (c *claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "SET lease_token = CASE") {
		return ctx
	}
	args := d.Args
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryExecMode); ok {
			args = args[1:]
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.Contains(d.SQL, "claim_slot"):
		c.slot = d.SQL
	default:
		c.plain = d.SQL
	}
	c.args = append([]any(nil), args...)
	return ctx
}

func (c *claimTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// claimBuffers runs sql with the latest claim's arguments, its limit set to
// limit, under EXPLAIN (ANALYZE, BUFFERS) in a transaction it rolls back,
// and returns the shared buffers the statement touched (the smaller of
// two runs: the first may mark entries it finds dead).
func (c *claimTracer) claimBuffers(t *testing.T, pool *pgxpool.Pool, sql string, limit int) int {
	t.Helper()
	c.mu.Lock()
	args := append([]any(nil), c.args...)
	c.mu.Unlock()
	args[1] = limit
	ctx := ctxT(t)
	best := -1
	for range 2 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []byte
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("explain claim: %v", err)
		}
		var root []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			}
		}
		if err := json.Unmarshal(plan, &root); err != nil {
			t.Fatal(err)
		}
		if n := root[0].Plan.Hit + root[0].Plan.Read; best < 0 || n < best {
			best = n
		}
	}
	return best
}

// Settling leaves each event's entry in the pending indexes until VACUUM,
// at the head of the order claims walk; with autovacuum off nothing removes
// them. A claim beside 190,000 settled events must cost what it costs on a
// table without them: it starts at the floor (claimfloor.go), not at the
// head of the index. Before the floor, a plain claim stepped over every
// settled row, and a slot claim over its slot's share (12,000 here).
func TestClaimCostDoesNotGrowWithSettledHistory(t *testing.T) {
	t.Run("slot", func(t *testing.T) {
		// Unordered: under a backlog, claims go by slot.
		claimCostGrowth(t, postgres.Config{}, func(tr *claimTracer) string { return tr.slot })
	})
	t.Run("plain", func(t *testing.T) {
		// Ordered claims never use slots.
		claimCostGrowth(t, postgres.Config{Ordering: true}, func(tr *claimTracer) string { return tr.plain })
	})
}

// claimCostGrowth compares what the claim text picks costs on a table with
// only a backlog and on one that also holds a settled history.
func claimCostGrowth(t *testing.T, scfg postgres.Config, text func(*claimTracer) string) {
	const history, backlog = 190000, 10000
	fresh := claimCost(t, scfg, text, 0, backlog)
	grown := claimCost(t, scfg, text, history, backlog)
	t.Logf("buffers per claim of %d: %d beside no history, %d beside %d settled events", costLimit, fresh, grown, history)
	// Some slack: one more index level, and where the leased rows fall
	// on pages. Walking the slots' share of the history costs 40 pages
	// more, the whole history hundreds.
	const slack = 16
	if grown > fresh+slack {
		t.Errorf("a claim touched %d buffers beside %d settled events, %d beside none: it walks the settled history", grown, history, fresh)
	}
}

const costLimit = 10

// claimCost builds a table with history settled rows (settled by a plain
// UPDATE, as a relay's settlements leave them: their pending-index entries
// point at rows no longer pending) and then backlog pending ones, and
// returns the buffers one claim of costLimit events touches there, with
// the arguments the store uses after a few claims.
func claimCost(t *testing.T, scfg postgres.Config, text func(*claimTracer) string, history, backlog int) int {
	tr := &claimTracer{}
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := testDB{pool: pool, schema: migratedSchema(t, pool)}
	scfg.Notify = postgres.NotifyOff
	s := newStore(t, db, scfg)
	s.SetFloorFullEveryForTest(time.Hour)
	ctx := ctxT(t)
	// Written an hour ago, as a backlog is: the floor stays a second
	// behind the database's clock.
	tbl := fmt.Sprintf("%q.outbox_events", db.schema)
	for _, q := range []string{
		`INSERT INTO ` + tbl + ` (id, event_type, payload, available_at)
			SELECT gen_random_uuid(), 'history', '{"n": 1}', now() - interval '2 hours' FROM generate_series(1, ` + fmt.Sprint(history) + `)`,
		`UPDATE ` + tbl + ` SET published_at = now() - interval '90 minutes' WHERE event_type = 'history'`,
		`INSERT INTO ` + tbl + ` (id, event_type, payload, available_at)
			SELECT gen_random_uuid(), 'backlog', '{"n": 1}', now() - interval '1 hour' FROM generate_series(1, ` + fmt.Sprint(backlog) + `)`,
		`ANALYZE ` + tbl,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const batch = 500
	claim := func() core.Batch {
		t.Helper()
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: batch, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != batch {
			t.Fatalf("claimed %d events, want %d", len(b.Events), batch)
		}
		return b
	}
	publish := func(b core.Batch) {
		t.Helper()
		out := make([]core.Outcome, len(b.Events))
		for i, e := range b.Events {
			out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
		}
		if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // the first claim has no floor yet, and is not by slot
		publish(claim())
	}
	// Two batches leased, as a relay's two claimers hold them, and a claim
	// with the arguments the store used for the second. (The rows settled
	// just before lie below that claim's floor: another transaction's
	// snapshot may keep their entries from being marked dead, so a claim
	// that steps over them costs what the machine's other sessions allow.)
	claim()
	claim()
	sql := text(tr)
	if sql == "" {
		t.Fatal("the claim to measure did not run")
	}
	return tr.claimBuffers(t, pool, sql, costLimit)
}

// Rows below the floor are the floor's only risk. Leased rows are pending,
// so the floor never passes them: a released event and an expired lease
// come back at the next claim, with no search from the beginning between.
func TestClaimFloorKeepsLeasedRowsClaimable(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyOff})
	ctx := ctxT(t)
	now := time.Now()
	written := make([]core.Event, 30)
	for i := range written {
		written[i] = mustEvent(t, "floor", map[string]int{"i": i})
		written[i].AvailableAt = now.Add(-time.Hour + time.Duration(i)*time.Second)
		if err := addTx(ctx, s, db.pool, written[i]); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(limit int, at time.Time) core.Batch {
		t.Helper()
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: limit, LeaseFor: time.Minute, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := claim(10, now) // the store searches for its floor first
	s.SetFloorFullEveryForTest(time.Hour)
	one := claim(1, now) // searched once more, then from the floor
	second := claim(10, now)
	assertSameIDs(t, "first claim", first.Events, written[:10])
	assertSameIDs(t, "second claim", one.Events, written[10:11])
	assertSameIDs(t, "third claim", second.Events, written[11:21])

	// The first batch is released: due at once, below rows claimed since.
	out := make([]core.Outcome, len(first.Events))
	for i, e := range first.Events {
		out[i] = core.Outcome{ID: e.ID, Kind: core.Released}
	}
	if err := s.Settle(ctx, core.SettleRequest{Lease: first.Lease, Outcomes: out}); err != nil {
		t.Fatal(err)
	}
	assertSameIDs(t, "claim after the release", claim(10, now).Events, written[:10])

	// Every lease expires: the oldest events come back first.
	assertSameIDs(t, "claim after the leases expired", claim(25, now.Add(2*time.Minute)).Events, written[:25])
}

// A row can land below the floor only if its INSERT was not visible when
// the floor passed its place: an available_at set in the past, or a
// transaction that commits long after it began. A transaction that
// commits within the floor's lag of its start is found at once; an event
// written with an old available_at waits for the next claim from the
// beginning of the pending set, and is then claimed.
func TestClaimFindsRowsWrittenBelowTheFloor(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyOff})
	ctx := ctxT(t)
	publishAll := func(b core.Batch) {
		t.Helper()
		out := make([]core.Outcome, len(b.Events))
		for i, e := range b.Events {
			out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
		}
		if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() core.Batch {
		t.Helper()
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: 100, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// A transaction begins and writes an event (available_at: its start),
	// and stays open while later events are written, claimed and settled.
	slow, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	late := mustEvent(t, "floor.late", nil)
	if err := s.Add(ctx, slow, late); err != nil {
		t.Fatal(err)
	}
	if err := addTx(ctx, s, db.pool, events(t, 5, "floor.before")...); err != nil {
		t.Fatal(err)
	}
	s.SetFloorFullEveryForTest(time.Hour)
	publishAll(claim()) // the store searches for its floor first
	for range 3 {
		if err := addTx(ctx, s, db.pool, events(t, 5, "floor.more")...); err != nil {
			t.Fatal(err)
		}
		publishAll(claim())
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	assertIDsOf(t, "claim after the slow transaction committed", claim().Events, late.ID)

	// An event written an hour in the past, below the floor, is claimed
	// once the store next searches for its floor from the beginning.
	s.SetFloorFullEveryForTest(200 * time.Millisecond)
	assertIDsOf(t, "claim after a search", claim().Events)
	old := mustEvent(t, "floor.old", nil)
	old.AvailableAt = time.Now().Add(-time.Hour)
	if err := addTx(ctx, s, db.pool, old); err != nil {
		t.Fatal(err)
	}
	var got []core.Event
	waitFor(t, 10*time.Second, "the event written below the floor to be claimed", func() bool {
		got = claim().Events
		return len(got) > 0
	})
	assertIDsOf(t, "claim of the backdated event", got, old.ID)
}

func assertSameIDs(t *testing.T, what string, got, want []core.Event) {
	t.Helper()
	ids := make([]core.ID, len(want))
	for i, e := range want {
		ids[i] = e.ID
	}
	assertIDsOf(t, what, got, ids...)
}

func assertIDsOf(t *testing.T, what string, got []core.Event, want ...core.ID) {
	t.Helper()
	g := map[core.ID]bool{}
	for _, e := range got {
		g[e.ID] = true
	}
	ok := len(got) == len(want)
	for _, id := range want {
		ok = ok && g[id]
	}
	if !ok {
		gotIDs := make([]string, len(got))
		for i, e := range got {
			gotIDs[i] = e.ID.String()
		}
		wantIDs := make([]string, len(want))
		for i, id := range want {
			wantIDs[i] = id.String()
		}
		t.Fatalf("%s: got %v, want %v", what, gotIDs, wantIDs)
	}
}
