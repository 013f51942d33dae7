package postgres

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Plans for a young table.
//
// pgx prepares every statement by default, and after five executions of a
// prepared statement PostgreSQL may switch to a generic plan, made once
// for any parameters and kept for the life of the connection until the
// table's statistics change. A generic plan cannot see how many rows a
// claim or a settlement touches, so it weighs a scan of the whole table
// against ten row lookups, and on a table of a few dozen pages the scan
// wins. Nothing revises that choice while the table grows unless ANALYZE
// runs (autovacuum does, every so often; with autovacuum off, never): a
// relay that started on a new, empty outbox then scans every row ever kept
// for each claim and each settlement, and its cost per event grows with
// the table's history (measured: a one-event claim went from 0.3 to 1.2 ms
// over its first 8,000 events; docs/BENCHMARKS.md).
//
// So while the table is young, the relay's statements (claims,
// settlements, prunes) run as unnamed statements, planned for their actual
// arguments each time (pgx.QueryExecModeCacheDescribe: still one round
// trip, still binary). Once a claim has returned a row at insertion
// position youngTableRows or beyond, the table is, physically, far larger
// than the size at which every generic plan uses row addresses and
// indexes, and the store goes back to prepared statements, which save the
// planning on every call (about a third of the database's work for a
// one-event claim).
//
// A table rewritten small later (TRUNCATE, VACUUM FULL) gets its plans
// remade by PostgreSQL at that moment; with autovacuum on, growth then
// triggers ANALYZE, which remakes them again.

// youngTableRows is the insertion position from which generic plans are
// safe. The switch to row addresses happens at about 30 to 50 pages (1,600
// minimal events, published); 4,096 events occupy several times that.
const youngTableRows = 4096

// planMode is how a store runs its relay statements: prepared or not, and
// from which floor its claims start (claimfloor.go).
type planMode struct {
	// young is the execution mode to use while the table is young, or 0
	// when the pool does not prepare statements at all (simple protocol,
	// exec or describe modes), so there is nothing to avoid.
	young pgx.QueryExecMode
	floor *claimFloor
}

func newPlanMode(pool *pgxpool.Pool) planMode {
	m := planMode{floor: &claimFloor{}}
	if pool == nil {
		return m // database/sql: its driver decides
	}
	cc := pool.Config().ConnConfig
	switch {
	case cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || cc.StatementCacheCapacity == 0:
	case cc.DescriptionCacheCapacity > 0:
		m.young = pgx.QueryExecModeCacheDescribe
	default:
		// Two round trips, but only while the table is young.
		m.young = pgx.QueryExecModeDescribeExec
	}
	return m
}

// relayArgs returns args for one of the relay's statements: with the
// unnamed-statement mode in front while the table is young.
func (s *Store) relayArgs(args []any) []any {
	if !s.planning() {
		return args
	}
	return append([]any{s.plans.young}, args...)
}

// planning is whether the relay's statements are planned per execution:
// while the table is young, and on the partitioned layout while the
// current period's partition has no statistics (createdfloor.go).
func (s *Store) planning() bool {
	return s.plans.young != 0 && (!s.grown.Load() || s.partYoung.Load())
}

// sawPositions notes the insertion positions a claim returned.
func (s *Store) sawPositions(refs *rowRefs) {
	if refs == nil || s.grown.Load() {
		return
	}
	for _, p := range refs.pos {
		if p >= youngTableRows {
			s.grown.Store(true)
			return
		}
	}
}
