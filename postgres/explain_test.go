package postgres_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// TestClaimUsesPendingIndex checks the plan the claim gets on a table whose
// history dwarfs its backlog: it must walk the partial pending index, never
// scan the table. The same holds for settling and pruning.
func TestClaimUsesPendingIndex(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := ctxT(t)
	tbl := fmt.Sprintf("%q.outbox_events", db.schema)
	_, err := db.pool.Exec(ctx, `
INSERT INTO `+tbl+` (id, event_type, payload, created_at, available_at, published_at)
SELECT gen_random_uuid(), 'old', '{"n": 1}', now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
FROM generate_series(1, 100000);
INSERT INTO `+tbl+` (id, event_type, payload)
SELECT gen_random_uuid(), 'new', '{"n": 1}' FROM generate_series(1, 1000);
ANALYZE `+tbl)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, ordered := range []bool{false, true} {
		s := newStore(t, db, postgres.Config{Ordering: ordered})
		token := pgtype.UUID{Bytes: core.NewID(), Valid: true}
		// Batch-sized arrays: the planner sizes unnest() by its argument.
		const batch = 1000
		ids := make([]pgtype.UUID, batch)
		kinds, errs, delays := make([]int32, batch), make([]string, batch), make([]int64, batch)
		tids := make([]pgtype.TID, batch)
		for i := range ids {
			ids[i] = pgtype.UUID{Bytes: core.NewID(), Valid: true}
			kinds[i] = int32(1 + i%4)
			tids[i] = pgtype.TID{BlockNumber: uint32(i / 10), OffsetNumber: uint16(1 + i%10), Valid: true}
		}
		var noTime pgtype.Timestamptz
		cases := []struct {
			name, sql string
			args      []any
			wantIndex string
			types     string // for PREPARE
		}{
			{"claim", s.ClaimSQLForTest(), []any{noTime, 100, token, time.Minute, lowestFloor, int64(math.MinInt64)}, "outbox_events_pending_idx", claimTypes},
			{"claim 1000", s.ClaimSQLForTest(), []any{noTime, 1000, token, time.Minute, lowestFloor, int64(math.MinInt64)}, "outbox_events_pending_idx", claimTypes},
			{"claim from a floor", s.ClaimSQLForTest(), []any{noTime, 1000, token, time.Minute, time.Now().Add(-time.Hour), int64(100000)}, "outbox_events_pending_idx", claimTypes},
			{"slot claim", s.ClaimSlotSQLForTest(), []any{noTime, 100, token, time.Minute, lowestFloor, int64(math.MinInt64)}, "outbox_events_slot_idx", claimTypes},
			{"slot claim 1000", s.ClaimSlotSQLForTest(), []any{noTime, 1000, token, time.Minute, lowestFloor, int64(math.MinInt64)}, "outbox_events_slot_idx", claimTypes},
			{"slot claim from a floor", s.ClaimSlotSQLForTest(), []any{noTime, 1000, token, time.Minute, time.Now().Add(-time.Hour), int64(100000)}, "outbox_events_slot_idx", claimTypes},
			{"publish", s.PublishSQLForTest(), []any{token, noTime, ids}, "outbox_events_pkey", "uuid, timestamptz, uuid[]"},
			{"publish one", s.PublishSQLForTest(), []any{token, noTime, ids[:1]}, "outbox_events_pkey", "uuid, timestamptz, uuid[]"},
			{"settle", s.SettleSQLForTest(), []any{token, noTime, ids, kinds, errs, delays}, "outbox_events_pkey", "uuid, timestamptz, uuid[], int4[], text[], int8[]"},
			{"delete", s.DeleteSQLForTest(), []any{token, ids}, "outbox_events_pkey", "uuid, uuid[]"},
			{"settle delete", s.SettleDeleteSQLForTest(), []any{token, noTime, ids[:batch/2], kinds[:batch/2], errs[:batch/2], delays[:batch/2], ids[batch/2:]}, "outbox_events_pkey", "uuid, timestamptz, uuid[], int4[], text[], int8[], uuid[]"},
			// By row address: a TID scan, whatever the table holds.
			{"publish by address", s.PublishTIDSQLForTest(), []any{token, noTime, tids, ids}, tidScan, "uuid, timestamptz, tid[], uuid[]"},
			{"publish one by address", s.PublishTIDSQLForTest(), []any{token, noTime, tids[:1], ids[:1]}, tidScan, "uuid, timestamptz, tid[], uuid[]"},
			{"settle by address", s.SettleTIDSQLForTest(), []any{token, noTime, ids, kinds, errs, delays, tids}, tidScan, "uuid, timestamptz, uuid[], int4[], text[], int8[], tid[]"},
			{"delete by address", s.DeleteTIDSQLForTest(), []any{token, tids, ids}, tidScan, "uuid, tid[], uuid[]"},
			{"settle delete by address", s.SettleDeleteTIDSQLForTest(), []any{token, noTime, ids[:batch/2], kinds[:batch/2], errs[:batch/2], delays[:batch/2], tids[batch/2:], tids[:batch/2], ids[batch/2:]}, tidScan, "uuid, timestamptz, uuid[], int4[], text[], int8[], tid[], tid[], uuid[]"},
			{"prune", s.PruneSQLForTest(), []any{time.Now(), 1000}, "outbox_events_published_idx", "timestamptz, bigint"},
		}
		// Prepared statements switch to a generic plan (parameters unknown)
		// after a few executions: check that plan too, through PREPARE and
		// EXPLAIN EXECUTE with plan_cache_mode forced.
		for _, generic := range []bool{false, true} {
			for ci, c := range cases {
				var plan []byte
				if !generic {
					err = conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+c.sql, c.args...).Scan(&plan)
				} else {
					name := fmt.Sprintf("explain_%d", ci)
					nulls := strings.TrimSuffix(strings.Repeat("NULL, ", strings.Count(c.types, ",")+1), ", ")
					_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan; PREPARE "+name+"("+c.types+") AS "+c.sql)
					if err == nil {
						err = conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+"("+nulls+")").Scan(&plan)
					}
					if _, derr := conn.Exec(ctx, "DEALLOCATE "+name+"; RESET plan_cache_mode"); err == nil {
						err = derr
					}
				}
				if err != nil {
					t.Fatalf("%s (generic=%v): explain: %v", c.name, generic, err)
				}
				var root []struct{ Plan planNode }
				if err := json.Unmarshal(plan, &root); err != nil {
					t.Fatal(err)
				}
				var scans []string
				var found bool
				root[0].Plan.walk(func(n planNode) {
					if n.NodeType == "Seq Scan" && n.RelationName == "outbox_events" {
						t.Errorf("ordered=%v generic=%v %s: plan scans the whole table:\n%s", ordered, generic, c.name, plan)
					}
					if n.IndexName != "" {
						scans = append(scans, n.NodeType+" on "+n.IndexName)
					}
					found = found || n.IndexName == c.wantIndex ||
						(c.wantIndex == tidScan && n.NodeType == "Tid Scan" && n.RelationName == "outbox_events")
				})
				if !found {
					t.Errorf("ordered=%v generic=%v %s: plan does not use %s (uses %s):\n%s", ordered, generic, c.name, c.wantIndex, strings.Join(scans, ", "), plan)
				}
			}
		}
	}
}

// claimTypes are the claim's parameter types, for PREPARE: now override,
// limit, lease token, lease duration, and the floor (claimfloor.go).
const claimTypes = "timestamptz, bigint, uuid, interval, timestamptz, bigint"

// lowestFloor is the floor of a claim from the beginning of the pending set.
var lowestFloor = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}

// tidScan, as a case's wantIndex, asks for a TID scan of the outbox.
const tidScan = "(Tid Scan)"

type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	ActualLoops  float64    `json:"Actual Loops"` // under EXPLAIN (ANALYZE); 0 when never executed
	Plans        []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}
