package postgres

import "context"

// Which layout the store's table has, plain or partitioned (partition.go),
// as the store last saw it: the claim on the partitioned layout differs
// (claimPartitioned), and so do the settlements that follow it. The store
// reads the table's kind with each search for the claim floor from the
// beginning (claimfloor.go: before its first claim, and every 5 s or
// more), so a table converted while relays run (ConvertToPartitioned) is
// seen within seconds; the conversion leaves every row in one partition
// until its cut-over, minutes at least after it, so a claim made with the
// plain statement in between still finds only the rows it locked.
//
// Until the store has seen the table, it uses the partitioned layout's
// statements, which are correct on a plain table too.

const (
	layoutUnknown int32 = iota
	layoutPlain
	layoutPartitioned
)

// partitioned is whether the store runs the partitioned layout's
// statements.
func (s *Store) partitioned() bool { return s.layout.Load() != layoutPlain }

// sawLayout records what a floor search found.
func (s *Store) sawLayout(partitioned bool) {
	if partitioned {
		s.layout.Store(layoutPartitioned)
	} else {
		s.layout.Store(layoutPlain)
	}
}

// knownLayout reads the table's kind if the store has not seen it yet
// (a store that never claimed: a Retention's, an operator's), so that
// its statements are the layout's own.
func (s *Store) knownLayout(ctx context.Context) {
	if s.layout.Load() != layoutUnknown {
		return
	}
	var partitioned bool
	if err := s.db.QueryRow(ctx, layoutSQL, s.n.outbox).Scan(&partitioned); err == nil {
		s.sawLayout(partitioned)
	}
}

// layoutSQL says whether the table $1 is partitioned.
const layoutSQL = `SELECT COALESCE((SELECT c.relkind = 'p' FROM pg_class c WHERE c.oid = to_regclass($1::text)), false)`
