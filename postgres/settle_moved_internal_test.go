package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// A table rewrite (VACUUM FULL, CLUSTER, pg_repack) while a lease is held
// can put another row of the same lease at an address the claim returned.
// A settlement by address that trusted the address alone then settled the
// wrong row: with DeletePublished, settling A published and B for retry
// deleted B, never published. These tests build exactly that layout and
// check every row ends as its own outcome says, whichever statement
// settles it.

// movedRows is how many events the tests claim: several pages at the
// table's fillfactor, so a rewrite at a higher fillfactor packs the rows
// of later pages onto the offsets of earlier ones.
const movedRows = 120

// rewrites are the ways a table gets rewritten under a live lease. Each
// first raises the fillfactor: pages rewritten denser than they were
// written put rows at the offsets the claim's lease versions had.
var rewrites = map[string]string{
	"VACUUM FULL": "VACUUM FULL %[1]s",
	"CLUSTER":     "CLUSTER %[1]s USING %[2]s",
}

// movedLease claims movedRows events and rewrites the table. It returns the
// batch and, for each event whose claimed address now holds another event
// of the same batch, that other event.
func movedLease(t *testing.T, pool *pgxpool.Pool, cfg Config, rewrite string) (*Store, core.Batch, map[core.ID]core.ID) {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.Schema(t, pool, "pgmoved")
	if err := Migrate(ctx, pool, &MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	cfg.Schema, cfg.Notify = schema, NotifyOff
	s, err := New(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]core.Event, movedRows)
	for i := range evs {
		evs[i] = core.Event{ID: core.NewID(), Type: "moved", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if err := s.Add(ctx, pool, evs...); err != nil {
		t.Fatal(err)
	}
	b := claimAll(t, s, movedRows)
	for _, stmt := range []string{"ALTER TABLE %[1]s SET (fillfactor = 100)", rewrites[rewrite]} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(stmt, s.n.outbox, pgx.Identifier{s.n.table + "_pkey"}.Sanitize())); err != nil {
			t.Fatal(err)
		}
	}
	at := map[pgtype.TID]core.ID{}
	rows, err := pool.Query(ctx, "SELECT ctid, id FROM "+s.n.outbox)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tid pgtype.TID
		var id pgtype.UUID
		if err := rows.Scan(&tid, &id); err != nil {
			t.Fatal(err)
		}
		at[tid] = id.Bytes
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	refs := b.Lease.Handle.(*rowRefs)
	holds := map[core.ID]core.ID{}
	for i, id := range refs.ids {
		if other, ok := at[refs.tids[i]]; ok && other != id {
			holds[id] = other
		}
	}
	if len(holds) < movedRows/4 {
		t.Fatalf("%s left only %d of %d claimed addresses holding another claimed row: the test no longer builds the case it is about", rewrite, len(holds), movedRows)
	}
	return s, b, holds
}

// checkRows compares every claimed row with the outcome it was given; no
// outcome means not settled yet: still leased as the claim left it.
func checkRows(t *testing.T, s *Store, b core.Batch, kinds map[core.ID]core.OutcomeKind) {
	t.Helper()
	ctx := context.Background()
	for _, e := range b.Events {
		var (
			present                bool
			published, dead, lease bool
			due                    bool
			attempts               int
			lastError              pgtype.Text
		)
		err := s.pool.QueryRow(ctx, `SELECT true, published_at IS NOT NULL, dead_at IS NOT NULL,
	lease_token IS NOT DISTINCT FROM $2 AND lease_until IS NOT NULL, available_at <= now(), attempts, last_error
FROM `+s.n.outbox+` WHERE id = $1`, pgtype.UUID{Bytes: e.ID, Valid: true}, pgtype.UUID{Bytes: b.Lease.Token, Valid: true}).
			Scan(&present, &published, &dead, &lease, &due, &attempts, &lastError)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		kind := kinds[e.ID]
		var bad string
		switch {
		case !present && !(kind == core.Published && s.cfg.DeletePublished):
			bad = "row is gone"
		case !present:
		case kind == 0 && !(lease && !published && !dead && attempts == 1 && !lastError.Valid):
			bad = "not settled yet, but no longer leased as claimed"
		case kind == core.Published && (s.cfg.DeletePublished || !published || dead || lease):
			bad = "not published"
		case kind == core.Retry && (published || dead || lease || due || lastError.String != "retry "+e.ID.String()):
			bad = "not scheduled for retry with its own error"
		case kind == core.DeadLettered && (published || !dead || lease || lastError.String != "dead "+e.ID.String()):
			bad = "not dead-lettered with its own error"
		case kind == core.Released && (published || dead || lease || !due || attempts != 0 || lastError.Valid):
			bad = "not released"
		}
		if bad != "" {
			t.Errorf("event %s, outcome %v: %s (present %v, published %v, dead %v, leased %v, due %v, attempts %d, last_error %q)",
				e.ID, kind, bad, present, published, dead, lease, due, attempts, lastError.String)
		}
	}
}

func outcome(id core.ID, kind core.OutcomeKind) core.Outcome {
	o := core.Outcome{ID: id, Kind: kind}
	switch kind {
	case core.Retry:
		o.Error, o.Delay = "retry "+id.String(), time.Hour
	case core.DeadLettered:
		o.Error = "dead " + id.String()
	}
	return o
}

// settleVia settles through Settle, or through SettleAndClaim with the
// statements pipelined as on a grown table (plans.go). The claim beside
// the settlement asks for a destination no event has, so it leaves the
// released events alone.
func settleVia(t *testing.T, s *Store, pipelined bool, req core.SettleRequest) error {
	t.Helper()
	if !pipelined {
		return s.Settle(context.Background(), req)
	}
	s.grown.Store(true)
	next, settleErr, claimErr := s.SettleAndClaim(context.Background(), req, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute, Destination: "nowhere"})
	if claimErr != nil || len(next.Events) != 0 {
		t.Fatalf("the claim beside the settlement: %d events, %v; want none", len(next.Events), claimErr)
	}
	return settleErr
}

// TestSettleAfterRewriteFindsEachOwnRow: every claimed address holding
// another row of the lease, settle first a part of the batch, all
// published (the publish or delete by address: the rows whose addresses
// they took must stay leased), then the rest with mixed outcomes where
// each event's address holds an event with another outcome.
func TestSettleAfterRewriteFindsEachOwnRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	for rewrite := range rewrites {
		for _, del := range []bool{false, true} {
			for _, pipelined := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/DeletePublished=%v/pipelined=%v", rewrite, del, pipelined), func(t *testing.T) {
					t.Parallel()
					s, b, holds := movedLease(t, pool, Config{DeletePublished: del}, rewrite)
					kinds := map[core.ID]core.OutcomeKind{}

					// Part one: events whose address now holds another
					// event, published; the events at their addresses are
					// left for part two.
					var first []core.Outcome
					for _, e := range b.Events {
						other, ok := holds[e.ID]
						if !ok || kinds[e.ID] != 0 || kinds[other] != 0 {
							continue
						}
						kinds[e.ID], kinds[other] = core.Published, core.Retry
						first = append(first, outcome(e.ID, core.Published))
					}
					if err := settleVia(t, s, pipelined, core.SettleRequest{Lease: b.Lease, Outcomes: first}); err != nil {
						t.Fatalf("settle %d events published: %v", len(first), err)
					}
					settled := map[core.ID]core.OutcomeKind{}
					for _, o := range first {
						settled[o.ID] = o.Kind
					}
					checkRows(t, s, b, settled)

					// Part two: the rest, mixed; the events at the first
					// part's addresses for retry, the others in turn.
					var rest []core.Outcome
					cycle := []core.OutcomeKind{core.DeadLettered, core.Released, core.Retry, core.Published}
					for i, e := range b.Events {
						if kinds[e.ID] == core.Published {
							continue
						}
						if kinds[e.ID] == 0 {
							kinds[e.ID] = cycle[i%len(cycle)]
						}
						rest = append(rest, outcome(e.ID, kinds[e.ID]))
					}
					if err := settleVia(t, s, pipelined, core.SettleRequest{Lease: b.Lease, Outcomes: rest}); err != nil {
						t.Fatalf("settle the other %d events, mixed: %v", len(rest), err)
					}
					checkRows(t, s, b, kinds)
				})
			}
		}
	}
}

// TestSettleAfterRewriteMixedAtOnce settles the whole batch in one
// statement, each event's address holding an event with another outcome:
// with DeletePublished, the published events are deleted by the statement
// that updates the others.
func TestSettleAfterRewriteMixedAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	for rewrite := range rewrites {
		for _, del := range []bool{false, true} {
			for _, pipelined := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/DeletePublished=%v/pipelined=%v", rewrite, del, pipelined), func(t *testing.T) {
					t.Parallel()
					s, b, holds := movedLease(t, pool, Config{DeletePublished: del}, rewrite)
					kinds := map[core.ID]core.OutcomeKind{}
					for _, e := range b.Events {
						if other, ok := holds[e.ID]; ok && kinds[e.ID] == 0 && kinds[other] == 0 {
							kinds[e.ID], kinds[other] = core.Published, core.Retry
						}
					}
					cycle := []core.OutcomeKind{core.DeadLettered, core.Released, core.Retry, core.Published}
					out := make([]core.Outcome, len(b.Events))
					for i, e := range b.Events {
						if kinds[e.ID] == 0 {
							kinds[e.ID] = cycle[i%len(cycle)]
						}
						out[i] = outcome(e.ID, kinds[e.ID])
					}
					if err := settleVia(t, s, pipelined, core.SettleRequest{Lease: b.Lease, Outcomes: out}); err != nil {
						t.Fatalf("settle: %v", err)
					}
					checkRows(t, s, b, kinds)
				})
			}
		}
	}
}
