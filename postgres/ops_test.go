package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// claimAll claims every due event (database clock) and settles each with
// the outcome outcome(i) says.
func claimAll(t *testing.T, s *postgres.Store, outcome func(e core.Event) core.Outcome) []core.Event {
	t.Helper()
	ctx := ctxT(t)
	b, err := s.Claim(ctx, core.ClaimRequest{Limit: 1000, LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if outcome != nil {
		out := make([]core.Outcome, len(b.Events))
		for i, e := range b.Events {
			out[i] = outcome(e)
			out[i].ID = e.ID
		}
		if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil {
			t.Fatal(err)
		}
	}
	return b.Events
}

func TestEventFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	for _, ordered := range []bool{false, true} {
		s := newStore(t, db, postgres.Config{Ordering: ordered, Table: "outbox_events"})
		created := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
		e := core.Event{
			ID: core.NewID(), Type: "order.confirmed", SchemaVersion: 0, Source: "/orders",
			AggregateType: "order", AggregateID: fmt.Sprint("o-", ordered), Sequence: 77,
			Payload:     []byte(`{"total": "9.99", "items": [1, 2]}`),
			Headers:     map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-tenant": "acme"},
			Destination: "https://example.com/hook", CreatedAt: created,
		}
		free := mustEvent(t, "free", 1)
		free.Sequence = 5 // kept as given: no aggregate
		if err := addTx(ctx, s, db.pool, e, free); err != nil {
			t.Fatal(err)
		}
		got := claimAll(t, s, func(core.Event) core.Outcome { return core.Outcome{Kind: core.Published} })
		if len(got) != 2 || got[0].ID != e.ID {
			t.Fatalf("claimed %v", got)
		}
		g := got[0]
		wantSeq := int64(77)
		if ordered {
			wantSeq = 1 // assigned by the store
		}
		if g.Type != e.Type || g.SchemaVersion != 1 || g.Source != e.Source || g.AggregateType != e.AggregateType ||
			g.AggregateID != e.AggregateID || g.Sequence != wantSeq || g.Destination != e.Destination ||
			!g.CreatedAt.Equal(created) || !g.AvailableAt.Equal(created) || g.Attempts != 1 ||
			len(g.Headers) != 2 || g.Headers["x-tenant"] != "acme" || !jsonEqual(g.Payload, e.Payload) {
			t.Fatalf("ordered=%v: round trip changed the event:\n got %+v\nwant %+v", ordered, g, e)
		}
		if got[1].Sequence != 5 {
			t.Fatalf("event without aggregate: Sequence %d, want the given 5", got[1].Sequence)
		}
	}
}

func TestOddHeadersFromOtherWritersDoNotStopTheRelay(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{})
	ctx := ctxT(t)
	_, err := db.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.outbox_events (id, event_type, payload, headers) VALUES (gen_random_uuid(), 'x', '{}', '{"n": 1, "s": "v", "o": {"a": true}}')`, db.schema))
	if err != nil {
		t.Fatal(err)
	}
	got := claimAll(t, s, nil)
	if len(got) != 1 || got[0].Headers["n"] != "1" || got[0].Headers["s"] != "v" || got[0].Headers["o"] != `{"a": true}` {
		t.Fatalf("headers = %v", got[0].Headers)
	}
	// Headers that are not an object are refused at insert.
	_, err = db.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.outbox_events (id, event_type, payload, headers) VALUES (gen_random_uuid(), 'x', '{}', '[1]')`, db.schema))
	if err == nil {
		t.Fatal("array headers accepted")
	}
}

func TestNotifyOncePerTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	s := newStore(t, db, postgres.Config{Notify: postgres.NotifyInTransaction})
	ctx := ctxT(t)
	conn, err := pgx.ConnectConfig(ctx, db.pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ch := s.Config().Channel
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := s.Add(ctx, tx, events(t, 5, "n")...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in commit order: a marker sent afterwards bounds
	// the wait without a timer.
	if _, err := db.pool.Exec(ctx, "SELECT pg_notify($1, 'end')", ch); err != nil {
		t.Fatal(err)
	}
	wakeups := 0
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload == "end" {
			break
		}
		wakeups++
	}
	if wakeups != 1 {
		t.Fatalf("a transaction with three Add calls sent %d notifications, want 1", wakeups)
	}
}

func TestGetDeadLettersPurge(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{})
	ctx := ctxT(t)
	evs := events(t, 6, "ops")
	if err := addTx(ctx, s, db.pool, evs...); err != nil {
		t.Fatal(err)
	}
	// 0: published, 1-3: dead, 4: leased, 5: pending.
	b, err := s.Claim(ctx, core.ClaimRequest{Limit: 5, LeaseFor: time.Hour})
	if err != nil || len(b.Events) != 5 {
		t.Fatalf("claim: %v", err)
	}
	out := []core.Outcome{{ID: evs[0].ID, Kind: core.Published}}
	for _, e := range evs[1:4] {
		out = append(out, core.Outcome{ID: e.ID, Kind: core.DeadLettered, Error: "poison \x00 with NUL"})
	}
	if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil {
		t.Fatal(err)
	}
	wantState := []postgres.State{postgres.StatePublished, postgres.StateDeadLettered, postgres.StateDeadLettered, postgres.StateDeadLettered, postgres.StateLeased, postgres.StatePending}
	for i, e := range evs {
		r, err := s.Get(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != wantState[i] || r.ID != e.ID {
			t.Fatalf("event %d: state %s, want %s", i, r.State, wantState[i])
		}
		if r.State == postgres.StateDeadLettered && (r.LastError != "poison  with NUL" || r.DeadAt.IsZero()) {
			t.Fatalf("dead letter record: %+v", r)
		}
	}
	if _, err := s.Get(ctx, core.NewID()); !errors.Is(err, postgres.ErrNotFound) {
		t.Fatalf("Get of an unknown ID: %v, want ErrNotFound", err)
	}

	// Page through the dead letters two at a time.
	var seen []core.ID
	after := core.ID{}
	for {
		page, err := s.DeadLetters(ctx, 2, after)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			seen = append(seen, r.ID)
		}
		after = page[len(page)-1].ID
	}
	if len(seen) != 3 {
		t.Fatalf("paged through %d dead letters, want 3", len(seen))
	}

	if _, err := s.Purge(ctx, core.ReplayFilter{}); !errors.Is(err, postgres.ErrEmptyFilter) {
		t.Fatalf("Purge with an empty filter: %v, want ErrEmptyFilter", err)
	}
	n, err := s.Purge(ctx, core.ReplayFilter{IDs: []core.ID{evs[1].ID, evs[4].ID, evs[5].ID}})
	if err != nil || n != 1 {
		t.Fatalf("Purge by IDs = %d, %v; want 1 (pending and leased events are never purged)", n, err)
	}
	n, err = s.Purge(ctx, core.ReplayFilter{DeadOnly: true})
	if err != nil || n != 2 {
		t.Fatalf("Purge of dead letters = %d, %v; want 2", n, err)
	}
	if got := count(t, db, "true"); got != 3 {
		t.Fatalf("%d rows left, want 3 (published, leased, pending)", got)
	}
}

func TestReplayFilters(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{})
	ctx := ctxT(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	mk := func(typ, agg string, at time.Time) core.Event {
		e := mustEvent(t, typ, 1)
		e.AggregateType, e.AggregateID, e.CreatedAt = "order", agg, at
		return e
	}
	evs := []core.Event{
		mk("a", "1", base), mk("b", "1", base.Add(time.Minute)), mk("a", "2", base.Add(2*time.Minute)),
		mk("c", "3", base.Add(3*time.Minute)), mk("a", "3", base.Add(4*time.Minute)),
	}
	if err := addTx(ctx, s, db.pool, evs...); err != nil {
		t.Fatal(err)
	}
	publishAll := func() {
		claimAll(t, s, func(core.Event) core.Outcome { return core.Outcome{Kind: core.Published} })
	}
	publishAll()
	pending := mk("a", "1", base) // pending events are never replayed
	pending.AvailableAt = time.Now().Add(time.Hour)
	if err := addTx(ctx, s, db.pool, pending); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		f    core.ReplayFilter
		want int64
	}{
		{"types", core.ReplayFilter{Types: []string{"a", "c"}}, 4},
		{"aggregate", core.ReplayFilter{AggregateType: "order", AggregateID: "1"}, 2},
		{"time range", core.ReplayFilter{Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute)}, 2},
		{"type and range", core.ReplayFilter{Types: []string{"a"}, Since: base.Add(time.Minute)}, 2},
		{"all", core.ReplayFilter{All: true}, 5},
		{"dead only", core.ReplayFilter{DeadOnly: true}, 0},
	}
	for _, c := range cases {
		n, err := s.Replay(ctx, c.f)
		if err != nil || n != c.want {
			t.Fatalf("%s: Replay = %d, %v; want %d", c.name, n, err, c.want)
		}
		got := claimAll(t, s, func(core.Event) core.Outcome { return core.Outcome{Kind: core.Published} })
		if int64(len(got)) != c.want {
			t.Fatalf("%s: claimed %d after replay, want %d", c.name, len(got), c.want)
		}
		for _, e := range got {
			if e.Attempts != 1 {
				t.Fatalf("%s: replayed event has Attempts %d, want 1", c.name, e.Attempts)
			}
		}
		publishAll()
	}
	if _, err := s.Replay(ctx, core.ReplayFilter{}); !errors.Is(err, postgres.ErrEmptyFilter) {
		t.Fatalf("empty filter: %v", err)
	}
}

func TestPruneInBatches(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{})
	ctx := ctxT(t)
	if err := addTx(ctx, s, db.pool, events(t, 27, "p")...); err != nil {
		t.Fatal(err)
	}
	i := 0
	claimAll(t, s, func(core.Event) core.Outcome {
		i++
		if i <= 2 {
			return core.Outcome{Kind: core.DeadLettered, Error: "x"}
		}
		return core.Outcome{Kind: core.Published}
	})
	var progress []int64
	n, err := s.Prune(ctx, core.PruneRequest{PublishedBefore: time.Now().Add(time.Hour), BatchSize: 10, Progress: func(d int64) { progress = append(progress, d) }})
	if err != nil || n != 25 {
		t.Fatalf("Prune = %d, %v; want 25", n, err)
	}
	if fmt.Sprint(progress) != "[10 20 25]" {
		t.Fatalf("progress = %v, want [10 20 25]", progress)
	}
	if got := count(t, db, "dead_at IS NOT NULL"); got != 2 {
		t.Fatalf("%d dead letters left, want 2: pruning never deletes them", got)
	}
	if _, err := s.Prune(ctx, core.PruneRequest{}); err == nil {
		t.Fatal("Prune without PublishedBefore succeeded")
	}
}

func TestStatsUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{})
	ctx := ctxT(t)
	old := mustEvent(t, "old", 1)
	old.CreatedAt = time.Now().Add(-time.Hour)
	old.AvailableAt = time.Now().Add(time.Hour) // not due, still pending
	if err := addTx(ctx, s, db.pool, old, mustEvent(t, "new", 1)); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 2 || st.OldestPendingAge < 59*time.Minute || st.OldestPendingAge > 2*time.Hour || st.Attempts[0] != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestDeduperRunsEffectInItsTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t, 3)
	ctx := ctxT(t)
	if _, err := db.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %q.ledger (event_id uuid, amount int)", db.schema)); err != nil {
		t.Fatal(err)
	}
	d, err := postgres.NewDeduper(db.pool, &postgres.DeduperConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	insert := fmt.Sprintf("INSERT INTO %q.ledger VALUES ($1, $2)", db.schema)
	boom := errors.New("boom")
	fail := true
	h := core.ChainHandler(postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		if _, err := tx.Exec(ctx, insert, e.ID.String(), 10); err != nil {
			return err
		}
		if fail {
			return core.Permanent(boom)
		}
		return nil
	}), core.Idempotent(d, "billing"))

	e := mustEvent(t, "charge", 1)
	if err := h.Handle(ctx, e); !errors.Is(err, boom) || !core.IsPermanent(err) {
		t.Fatalf("failing effect: err = %v, want the effect's error, still permanent", err)
	}
	ledger := func() int {
		var n int
		if err := db.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %q.ledger", db.schema)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if ledger() != 0 {
		t.Fatal("the failed effect's write was committed")
	}
	fail = false
	for i := 0; i < 3; i++ {
		if err := h.Handle(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if ledger() != 1 {
		t.Fatalf("ledger has %d rows after 3 deliveries, want 1", ledger())
	}

	// Without the deduper there is no transaction, and Effect says so.
	bare := postgres.Effect(func(context.Context, pgx.Tx, core.Event) error { return nil })
	if err := bare.Handle(ctx, e); !errors.Is(err, postgres.ErrNoTx) {
		t.Fatalf("Effect without a deduper: %v, want ErrNoTx", err)
	}
	if _, ok := postgres.TxFromContext(ctx); ok {
		t.Fatal("TxFromContext found a transaction in a plain context")
	}

	// Retention of processed records.
	n, err := d.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("deduper Prune = %d, %v; want 1", n, err)
	}
	if applied, err := d.Once(ctx, core.DedupeKey{Consumer: "billing", EventID: e.ID}, func(context.Context) error { return nil }); err != nil || !applied {
		t.Fatalf("Once after pruning its record = %v, %v; want it to run again", applied, err)
	}
	if _, err := d.Once(ctx, core.DedupeKey{EventID: e.ID}, func(context.Context) error { return nil }); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("Once without a consumer: %v", err)
	}
}

func TestDeduperOnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 2)
	d, err := postgres.NewDeduper(pool, &postgres.DeduperConfig{Schema: pgtest.Schema(t, pool, "empty")})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err = d.Once(ctxT(t), core.DedupeKey{Consumer: "c", EventID: core.NewID()}, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, postgres.ErrNotMigrated) || ran {
		t.Fatalf("Once on an empty schema = %v (ran %v), want ErrNotMigrated", err, ran)
	}
}

func TestDeletePublished(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := newStore(t, db, postgres.Config{DeletePublished: true})
	ctx := ctxT(t)
	evs := events(t, 4, "d")
	if err := addTx(ctx, s, db.pool, evs...); err != nil {
		t.Fatal(err)
	}
	kinds := map[core.ID]core.OutcomeKind{evs[0].ID: core.Published, evs[1].ID: core.Retry, evs[2].ID: core.DeadLettered, evs[3].ID: core.Published}
	claimAll(t, s, func(e core.Event) core.Outcome { return core.Outcome{Kind: kinds[e.ID], Error: "x", Delay: time.Hour} })
	for i, e := range evs {
		_, err := s.Get(ctx, e.ID)
		if gone := errors.Is(err, postgres.ErrNotFound); gone != (kinds[e.ID] == core.Published) {
			t.Fatalf("event %d (%v): Get err = %v", i, kinds[e.ID], err)
		}
	}
	// The all-published path deletes too.
	more := events(t, 3, "d")
	if err := addTx(ctx, s, db.pool, more...); err != nil {
		t.Fatal(err)
	}
	claimAll(t, s, func(core.Event) core.Outcome { return core.Outcome{Kind: core.Published} })
	if n := count(t, db, "true"); n != 2 {
		t.Fatalf("%d rows left, want 2 (the retrying and the dead-lettered event)", n)
	}
}

// TestQueryExecModes runs the store on pools configured for poolers
// (PgBouncer in transaction mode needs QueryExecModeExec or the simple
// protocol): every statement must work without prepared-statement caching.
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	db := newDB(t, 1)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeDescribeExec} {
		cfg, err := pgxpool.ParseConfig(pgtest.URL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 2
		cfg.ConnConfig.DefaultQueryExecMode = mode
		ctx := ctxT(t)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, ordered := range []bool{false, true} {
			s := newStore(t, testDB{pool: pool, schema: migratedSchema(t, db.pool)}, postgres.Config{Ordering: ordered})
			evs := events(t, 3, "mode")
			evs[0].Headers = map[string]string{"k": "v"}
			evs[1].AggregateID = "a"
			evs[2].AggregateID = "b"
			evs[2].CreatedAt = time.Now().Add(-time.Minute)
			if err := addTx(ctx, s, pool, evs[:2]...); err != nil {
				t.Fatalf("mode %v: Add: %v", mode, err)
			}
			if err := addTx(ctx, s, pool, evs[2]); err != nil { // the single-event statement
				t.Fatalf("mode %v: Add one: %v", mode, err)
			}
			got := claimAll(t, s, func(e core.Event) core.Outcome {
				if e.ID == evs[0].ID {
					return core.Outcome{Kind: core.Retry, Error: "x", Delay: time.Hour}
				}
				return core.Outcome{Kind: core.Published}
			})
			if len(got) != 3 || got[0].Headers["k"] != "v" && got[1].Headers["k"] != "v" && got[2].Headers["k"] != "v" {
				t.Fatalf("mode %v: claimed %+v", mode, got)
			}
			if _, err := s.Stats(ctx); err != nil {
				t.Fatalf("mode %v: Stats: %v", mode, err)
			}
			if _, err := s.Replay(ctx, core.ReplayFilter{IDs: []core.ID{evs[1].ID}, Types: []string{"mode"}}); err != nil {
				t.Fatalf("mode %v: Replay: %v", mode, err)
			}
			if _, err := s.Prune(ctx, core.PruneRequest{PublishedBefore: time.Now().Add(time.Hour)}); err != nil {
				t.Fatalf("mode %v: Prune: %v", mode, err)
			}
			if _, err := s.DeadLetters(ctx, 10, core.ID{}); err != nil {
				t.Fatalf("mode %v: DeadLetters: %v", mode, err)
			}
		}
		pool.Close()
	}
}

// TestDeduperConcurrentDeliveries delivers one event eight times at once to
// an effect that writes through the deduper's transaction: the write happens
// once, and exactly one delivery reports it applied.
func TestDeduperConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	db := newDB(t, 9)
	ctx := ctxT(t)
	if _, err := db.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %q.balance (n int); INSERT INTO %q.balance VALUES (0)", db.schema, db.schema)); err != nil {
		t.Fatal(err)
	}
	d, err := postgres.NewDeduper(db.pool, &postgres.DeduperConfig{Schema: db.schema})
	if err != nil {
		t.Fatal(err)
	}
	key := core.DedupeKey{Consumer: "wallet", EventID: core.NewID()}
	bump := fmt.Sprintf("UPDATE %q.balance SET n = n + 1", db.schema)
	start := make(chan struct{})
	results := make(chan error, 8)
	applied := make(chan bool, 8)
	for i := 0; i < 8; i++ {
		go func() {
			<-start
			ok, err := d.Once(ctx, key, func(ctx context.Context) error {
				tx, found := postgres.TxFromContext(ctx)
				if !found {
					return errors.New("no transaction")
				}
				_, err := tx.Exec(ctx, bump)
				return err
			})
			applied <- ok
			results <- err
		}()
	}
	close(start)
	n := 0
	for i := 0; i < 8; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
		if <-applied {
			n++
		}
	}
	var balance int
	if err := db.pool.QueryRow(ctx, fmt.Sprintf("SELECT n FROM %q.balance", db.schema)).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if balance != 1 || n != 1 {
		t.Fatalf("8 concurrent deliveries: balance %d, %d reported applied; want 1 and 1", balance, n)
	}
}

// TestSingleEventAdds covers the single-row statements, ordered or not,
// in every notify mode: sequences continue across single and batch writes.
func TestSingleEventAdds(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	for _, notify := range []postgres.NotifyMode{postgres.NotifyInTransaction, postgres.NotifyAfterCommit, postgres.NotifyOff} {
		for _, ordered := range []bool{true, false} {
			s := newStore(t, testDB{pool: db.pool, schema: migratedSchema(t, db.pool)}, postgres.Config{Ordering: ordered, Notify: notify})
			var want []int64
			var all []core.Event
			for i := 0; i < 3; i++ {
				e := mustEvent(t, "one", i)
				e.AggregateType, e.AggregateID = "order", "7"
				if err := addTx(ctx, s, db.pool, e); err != nil {
					t.Fatalf("notify=%v ordered=%v: %v", notify, ordered, err)
				}
				all = append(all, e)
				want = append(want, int64(i+1))
			}
			batch := events(t, 2, "two")
			for i := range batch {
				batch[i].AggregateType, batch[i].AggregateID = "order", "7"
				want = append(want, int64(4+i))
			}
			if err := addTx(ctx, s, db.pool, batch...); err != nil {
				t.Fatal(err)
			}
			all = append(all, batch...)
			for i, e := range all {
				r, err := s.Get(ctx, e.ID)
				if err != nil {
					t.Fatal(err)
				}
				if ordered && r.Sequence != want[i] || !ordered && r.Sequence != 0 {
					t.Fatalf("notify=%v ordered=%v: event %d has sequence %d", notify, ordered, i, r.Sequence)
				}
			}
		}
	}
}

func TestBeforeAddSeesCopiesAndItsChangesAreStored(t *testing.T) {
	db := newDB(t, 2)
	var seen int
	store := newStore(t, db, postgres.Config{BeforeAdd: func(ctx context.Context, e *core.Event) {
		seen++
		h := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		for k, v := range e.Headers {
			h[k] = v
		}
		e.Headers = h
	}})
	ctx := ctxT(t)
	one := mustEvent(t, "before.add", map[string]int{"n": 1})
	two := mustEvent(t, "before.add", map[string]int{"n": 2})
	two.Headers = map[string]string{"tenant": "acme"}
	callers := []core.Event{one, two}
	if err := store.Add(ctx, db.pool, callers...); err != nil {
		t.Fatal(err)
	}
	if seen != 2 {
		t.Fatalf("BeforeAdd called %d times, want 2", seen)
	}
	if callers[0].Headers != nil || len(callers[1].Headers) != 1 {
		t.Fatalf("BeforeAdd changed the caller's events: %+v", callers)
	}
	for _, e := range callers {
		rec, err := store.Get(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Event.Headers["traceparent"] == "" {
			t.Fatalf("event %s stored without the hook's header: %v", e.ID, rec.Event.Headers)
		}
	}
}
