package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Vacuuming the partitions being written. Every settled event leaves one
// dead row version behind: the settlement sets published_at, which the
// pending index's predicate reads, so the update is never HOT. All of
// them land in the current period's partition, the one whose pending
// index the claims walk, and there they slow every claim until a VACUUM
// removes them. Autovacuum reaches a table at most once per naptime (a
// minute by default), later when its workers are busy elsewhere, and
// never where it is turned off; at thousands of events a second that is
// hundreds of thousands of dead rows. Dropping retired partitions keeps
// retention from adding any, but the settlements' own are left to a
// VACUUM: Retention's leader runs Vacuum every VacuumInterval.

// Vacuum's threshold: a partition is vacuumed once its dead rows reach
// vacuumBaseDead plus vacuumScaleDead of its live rows. It is
// autovacuum's rule (autovacuum_vacuum_threshold, 50, plus
// autovacuum_vacuum_scale_factor) with the scale factor the partitions
// are created with (partitions.go), and a larger base, so that a
// partition that settles a few events between two calls is left alone
// while a large one waits until the VACUUM is worth its scan.
const (
	vacuumBaseDead  = 1000
	vacuumScaleDead = 0.02
)

// VacuumReport is what one Vacuum did.
type VacuumReport struct {
	// Vacuumed names the partitions vacuumed, most dead rows first.
	Vacuumed []string
	// DeadRows sums their dead rows as the statistics counted them before
	// the VACUUM.
	DeadRows int64
}

// Vacuum vacuums each partition of the outbox table whose dead rows
// (pg_stat_user_tables.n_dead_tup) reach 1,000 plus 2 % of its live rows,
// with VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false): a partition
// another session has locked (a detach) is skipped, the indexes are
// always cleaned (the claims walk them), and the VACUUM never takes the
// ACCESS EXCLUSIVE lock that truncating the file's empty end needs, which
// would stall the writers. VACUUM takes only a lock that lets writers,
// relays and readers go on. Only partitions whose owner the current user
// is a member of are considered: VACUUM skips the others with a warning.
// On a plain table it does nothing and returns an empty report: a plain
// table's dead rows are autovacuum's, and a VACUUM of a large table every
// few seconds would cost more than it saves.
//
// The statistics are those the server has collected, so dead rows made in
// the last second or so may not be counted yet; they are at the next call.
func (p *Partitions) Vacuum(ctx context.Context) (VacuumReport, error) {
	var rep VacuumReport
	// The parameters are cast: through database/sql they arrive as text,
	// and PostgreSQL would otherwise type them after n_dead_tup (bigint)
	// and refuse 0.02.
	rows, err := p.db.Query(ctx, `SELECT c.relname::text, s.n_dead_tup
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid AND c.relkind = 'r'
JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE i.inhparent = to_regclass($1)
	AND pg_has_role(c.relowner, 'USAGE')
	AND s.n_dead_tup >= $2::int8 + $3::float8 * s.n_live_tup
ORDER BY s.n_dead_tup DESC`, p.n.outbox, int64(vacuumBaseDead), float64(vacuumScaleDead))
	if err != nil {
		return rep, wrap("partitions: find the partitions to vacuum", err)
	}
	type candidate struct {
		name string
		dead int64
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
		var c candidate
		err := row.Scan(&c.name, &c.dead)
		return c, err
	})
	if err != nil {
		return rep, wrap("partitions: find the partitions to vacuum", err)
	}
	for _, c := range cands {
		part := pgx.Identifier{p.n.schema, c.name}.Sanitize()
		if _, err := p.db.Exec(ctx, "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) "+part); err != nil {
			return rep, wrap("partitions: vacuum "+part, err)
		}
		rep.Vacuumed = append(rep.Vacuumed, c.name)
		rep.DeadRows += c.dead
		p.log.DebugContext(ctx, "vacuumed partition", "partition", c.name, "dead_rows", c.dead)
	}
	return rep, nil
}
