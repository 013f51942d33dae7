package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// tidTestStore returns a store on a fresh migrated schema holding n pending
// events, and the events.
func tidTestStore(t *testing.T, n int, cfg Config) (*Store, []core.Event) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t, 2)
	schema := pgtest.Schema(t, pool, "pgtid")
	if err := Migrate(ctx, pool, &MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	cfg.Schema = schema
	s, err := New(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	events := make([]core.Event, n)
	for i := range events {
		events[i] = core.Event{ID: core.NewID(), Type: "tid.test", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if err := s.Add(ctx, pool, events...); err != nil {
		t.Fatal(err)
	}
	return s, events
}

func claimAll(t *testing.T, s *Store, n int) core.Batch {
	t.Helper()
	b, err := s.Claim(context.Background(), core.ClaimRequest{Limit: n, LeaseFor: time.Minute})
	if err != nil || len(b.Events) != n {
		t.Fatalf("claim: %d events, %v; want %d", len(b.Events), err, n)
	}
	if !b.PayloadsAreJSON {
		t.Fatal("claim does not vouch for its payloads: the jsonb column guarantees them")
	}
	refs, ok := b.Lease.Handle.(*rowRefs)
	if !ok || len(refs.tids) != n {
		t.Fatalf("claim's lease handle is %T, want the row addresses of %d rows", b.Lease.Handle, n)
	}
	return b
}

func published(outcomes ...core.Event) []core.Outcome {
	out := make([]core.Outcome, len(outcomes))
	for i, e := range outcomes {
		out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
	}
	return out
}

// pendingCount counts rows neither published nor dead.
func pendingCount(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+s.n.outbox+" WHERE published_at IS NULL AND dead_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeaseUpdateStaysOnItsPage is what makes settling by address work and
// the claim cheap: with the table's fillfactor every leased row's new
// version lands on the page of the version it replaces (a HOT update).
func TestLeaseUpdateStaysOnItsPage(t *testing.T) {
	t.Parallel()
	const n = 500
	s, _ := tidTestStore(t, n, Config{Notify: NotifyOff})
	ctx := context.Background()
	before := map[core.ID]uint32{}
	rows, err := s.pool.Query(ctx, "SELECT id, ctid FROM "+s.n.outbox)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id pgtype.UUID
		var tid pgtype.TID
		if err := rows.Scan(&id, &tid); err != nil {
			t.Fatal(err)
		}
		before[id.Bytes] = tid.BlockNumber
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	b := claimAll(t, s, n)
	refs := b.Lease.Handle.(*rowRefs)
	moved := 0
	for i, id := range refs.ids {
		if before[id] != refs.tids[i].BlockNumber {
			moved++
		}
	}
	if moved != 0 {
		t.Fatalf("%d of %d leased rows moved to another page: lease updates are not HOT (fillfactor?)", moved, n)
	}
}

// TestSettleByAddressOutOfOrderAndPartly settles a claim in pieces and out of
// claim order, mixing outcomes: each piece must find exactly its rows.
func TestSettleByAddressOutOfOrderAndPartly(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeletePublished=%v", del), func(t *testing.T) {
			t.Parallel()
			s, _ := tidTestStore(t, 6, Config{Notify: NotifyOff, DeletePublished: del})
			ctx := context.Background()
			b := claimAll(t, s, 6)
			ev := b.Events
			// Reversed: the in-order fast path does not apply.
			first := published(ev[3], ev[1])
			if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: first}); err != nil {
				t.Fatalf("settle two, reversed: %v", err)
			}
			mixed := []core.Outcome{
				{ID: ev[5].ID, Kind: core.Retry, Error: "later", Delay: time.Hour},
				{ID: ev[0].ID, Kind: core.Published},
				{ID: ev[2].ID, Kind: core.DeadLettered, Error: "poison"},
				{ID: ev[4].ID, Kind: core.Released},
			}
			if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: mixed}); err != nil {
				t.Fatalf("settle the rest, mixed: %v", err)
			}
			// Released (ev[4]) is pending and due; Retry (ev[5]) pending, not due.
			if got := pendingCount(t, s); got != 2 {
				t.Fatalf("%d pending rows, want 2 (the released and the retried event)", got)
			}
			again, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
			if err != nil || len(again.Events) != 1 || again.Events[0].ID != ev[4].ID {
				t.Fatalf("claim after settle: %v, %v; want only the released event", again.Events, err)
			}
			// Settling an event twice under the old lease: its token is gone.
			err = s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: published(ev[0])})
			var lost *core.LeaseLostError
			if !errors.As(err, &lost) || !slices.Equal(lost.IDs, []core.ID{ev[0].ID}) {
				t.Fatalf("second settle of one event: %v, want a LeaseLostError naming it", err)
			}
		})
	}
}

// TestSettleAfterRowsMoved: VACUUM FULL rewrites the table, so every address
// a claim returned now points elsewhere (or nowhere). The settlement must
// still find every row, by ID, and report no lost lease.
//
// It runs on a young table (settle, then claim) and as on a grown one (the
// two pipelined in one round trip; plans.go).
func TestSettleAfterRowsMoved(t *testing.T) {
	t.Parallel()
	for _, grown := range []bool{false, true} {
		t.Run(fmt.Sprintf("grown=%v", grown), func(t *testing.T) {
			t.Parallel()
			settleAfterRowsMoved(t, grown)
		})
	}
}

func settleAfterRowsMoved(t *testing.T, grown bool) {
	const n = 50
	s, _ := tidTestStore(t, n, Config{Notify: NotifyOff})
	s.grown.Store(grown)
	ctx := context.Background()
	// Published rows ahead of the claimed ones, so the rewrite shifts them.
	b0 := claimAll(t, s, 10)
	if err := s.Settle(ctx, core.SettleRequest{Lease: b0.Lease, Outcomes: published(b0.Events...)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "DELETE FROM "+s.n.outbox+" WHERE published_at IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	b := claimAll(t, s, n-10)
	if _, err := s.pool.Exec(ctx, "VACUUM FULL "+s.n.outbox); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i, id := range b.Lease.Handle.(*rowRefs).ids {
		var tid pgtype.TID
		if err := s.pool.QueryRow(ctx, "SELECT ctid FROM "+s.n.outbox+" WHERE id = $1", id).Scan(&tid); err != nil {
			t.Fatal(err)
		}
		if tid != b.Lease.Handle.(*rowRefs).tids[i] {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("VACUUM FULL moved no leased row: the test no longer exercises the fallback")
	}
	next, settleErr, claimErr := s.SettleAndClaim(ctx,
		core.SettleRequest{Lease: b.Lease, Outcomes: published(b.Events...)},
		core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
	if settleErr != nil || claimErr != nil || len(next.Events) != 0 {
		t.Fatalf("settle and claim after the rewrite (%d rows moved): settle %v, claim %v, %d claimed", moved, settleErr, claimErr, len(next.Events))
	}
	if got := pendingCount(t, s); got != 0 {
		t.Fatalf("%d rows still pending after settling all of them", got)
	}
}

// TestForeignHandleIsIgnored: a handle that is not this store's, or is nil,
// only costs the address lookup.
func TestForeignHandleIsIgnored(t *testing.T) {
	t.Parallel()
	s, _ := tidTestStore(t, 4, Config{Notify: NotifyOff})
	ctx := context.Background()
	b := claimAll(t, s, 4)
	for i, h := range []any{nil, "not a handle"} {
		lease := core.Lease{Token: b.Lease.Token, Until: b.Lease.Until, Handle: h}
		ev := b.Events[2*i : 2*i+2]
		if err := s.Settle(ctx, core.SettleRequest{Lease: lease, Outcomes: published(ev...)}); err != nil {
			t.Fatalf("settle with handle %v: %v", h, err)
		}
	}
	if got := pendingCount(t, s); got != 0 {
		t.Fatalf("%d rows still pending", got)
	}
}

// TestSlotClaimTopsUpInOrder: under a backlog a claim starts with one slot
// of the pending set; when the slot holds too few due events the batch is
// topped up from the whole set under the same lease, in claim order, and
// settles as one batch.
func TestSlotClaimTopsUpInOrder(t *testing.T) {
	t.Parallel()
	// 200 events: insertion positions 1–200 fill groups 0–3 of 64, so
	// slots 0–3 hold events and the other 12 are empty.
	s, events := tidTestStore(t, 200, Config{Notify: NotifyOff})
	ctx := context.Background()
	seen := map[core.ID]int{}
	order := map[core.ID]int{}
	for i, e := range events {
		order[e.ID] = i
	}
	slotClaims := 0
	for claims := 0; ; claims++ {
		if claims > 100 {
			t.Fatal("claims never came back empty")
		}
		slot := s.backlog.Load()
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: 30, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) == 0 {
			break
		}
		if slot {
			slotClaims++
		}
		if len(b.Events) < 30 && s.backlog.Load() {
			t.Fatalf("a short batch (%d) left the store believing in a backlog", len(b.Events))
		}
		for i, e := range b.Events {
			seen[e.ID]++
			if i > 0 && order[e.ID] < order[b.Events[i-1].ID] {
				t.Fatalf("batch not in claim order at %d: %v after %v", i, order[e.ID], order[b.Events[i-1].ID])
			}
		}
		if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: published(b.Events...)}); err != nil {
			t.Fatalf("settle a merged batch: %v", err)
		}
	}
	if slotClaims == 0 {
		t.Fatal("no claim ran as a slot claim: the backlog was never seen")
	}
	for _, e := range events {
		if seen[e.ID] != 1 {
			t.Fatalf("event %d claimed %d times", order[e.ID], seen[e.ID])
		}
	}
	if got := pendingCount(t, s); got != 0 {
		t.Fatalf("%d rows still pending", got)
	}
}
