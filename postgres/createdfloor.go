package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The created_at range of the partitioned layout's claim.
//
// A claim walks the pending index of every partition of the table (a
// merge of one index scan per partition, and the floor probe's another),
// and its update is planned over all of them: the more periods a table
// keeps, the more each claim costs, although the old periods hold nothing
// pending once their events are settled, and the periods ahead nothing
// yet. So the claim also carries a range of created_at, from the start of
// the oldest period that may hold a pending row to the end of the current
// period, and its three scans keep to the partitions in it, pruned before
// the statement is planned (a custom plan) or as the executor starts (a
// generic one): the others are neither planned nor opened. When the range
// is the current period alone, as it is whenever nothing older is
// pending, the claim runs on the period's partition itself (claimOneSQL),
// where PostgreSQL keeps a generic plan of it.
//
// The range is found with each search for the claim floor from the
// beginning (claimfloor.go: before the first claim, then every 5 s or
// more, and as soon as the current period ends): the store lists the
// table's partitions and probes each but the current one for a pending
// row, one index probe each, in one statement. The floor is the start of
// the oldest period with one, or of the current period; the ceiling the
// end of the current period, or none when a later period holds one; the
// whole table while the default partition or the legacy one
// (partition_convert.go) holds one, since rows of any creation time may be
// there.
//
// What lies outside it is a row made pending after the search in a period
// that had none: written with a created_at in the past or the future (by
// a foreign writer, or by a transaction that began before its period
// ended and committed after the search), or an old event replayed. Such
// rows wait, as the rows below the claim floor do, for the next search;
// they are never lost.

// createdRange is what the claims of the partitioned layout keep to:
// created_at from floor (inclusive) to ceiling (exclusive), until the
// database's clock reaches until (the end of the current period), when
// the store looks again.
type createdRange struct {
	floor, ceiling pgtype.Timestamptz
	until          time.Time // zero: none
}

// everything is the range that prunes nothing.
var everything = createdRange{floor: lowest, ceiling: highest}

// highest is the ceiling that excludes nothing.
var highest = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}

// createdFloor finds the created_at range of the claims; everything on
// any failure.
func (s *Store) createdFloor(ctx context.Context) createdRange {
	p := &Partitions{db: s.db, n: s.n}
	t, err := p.table(ctx, false)
	if err != nil || t.layout == PartitionNone {
		return everything
	}
	q, args, probed := s.createdProbe(t.parts)
	var pending []int32
	var now time.Time
	var planned []string // partitions a plan made now would not scan whole
	asked := time.Now()
	if err := s.db.QueryRow(ctx, q, args...).Scan(&pending, &now, &planned); err != nil {
		return everything
	}
	s.sawCurrent(t.parts, now, planned)
	lag := now.Add(-time.Second)
	var cur *PartitionInfo
	for i, pi := range t.parts {
		if !pi.Default && !pi.From.IsZero() && !pi.From.After(lag) && pi.To.After(lag) {
			cur = &t.parts[i]
		}
	}
	if cur == nil {
		return everything // no partition for now: rows go to the default one
	}
	r := createdRange{floor: pgtype.Timestamptz{Time: cur.From, Valid: true}, ceiling: pgtype.Timestamptz{Time: cur.To, Valid: true},
		// The end of the period by this process's clock.
		until: cur.To.Add(asked.Sub(now))}
	for _, i := range pending {
		pi := probed[i]
		switch {
		case pi.Default || pi.From.IsZero():
			return everything
		case pi.From.Before(r.floor.Time):
			r.floor.Time = pi.From
		case !pi.From.Before(cur.To):
			r.ceiling = highest // a later period holds a pending row
		}
	}
	return r
}

// createdProbe is the search for the created_at range over the table's
// partitions parts, with its arguments: which of them (indexes into
// probed) hold a pending row, the database's clock, and which partitions
// a plan made now would reach by address and index (sawCurrent).
func (s *Store) createdProbe(parts []PartitionInfo) (q string, args []any, probed []PartitionInfo) {
	minRows := float32(plannedRows)
	if s.plannedRows != nil {
		minRows = float32(*s.plannedRows)
	}
	args = []any{s.n.outbox, minRows, int64(plannedPages) * 8192}
	var probes []string
	for _, pi := range parts {
		part := pgx.Identifier{s.n.schema, pi.Name}.Sanitize()
		probe := pendingProbe(part)
		// The current period is in the range whatever it holds, so it
		// is not probed: its pending index is where settled rows'
		// entries collect, which the claim floor's own search walks.
		// CASE, because PostgreSQL is free to evaluate an AND's
		// subquery before its other conditions (it did).
		if !pi.Default && !pi.To.IsZero() && !pi.From.IsZero() {
			probe = `CASE WHEN ` + boundLiteral(pi.To) + `::timestamptz <= now() - interval '1 second' OR ` +
				boundLiteral(pi.From) + `::timestamptz > now() - interval '1 second' THEN ` + probe + ` END`
		}
		probes = append(probes, `SELECT `+strconv.Itoa(len(probed))+` AS i WHERE `+probe)
		probed = append(probed, pi)
	}
	if len(probes) == 0 {
		return `SELECT NULL::int4[], now(), ARRAY[]::text[] WHERE $1::text IS NOT NULL AND $2::float4 IS NOT NULL AND $3::int8 IS NOT NULL`, args, nil
	}
	return `SELECT (SELECT array_agg(x.i) FROM (` + strings.Join(probes, "\nUNION ALL ") + `) x), now(),
	ARRAY(SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1::text) AND (c.reltuples >= $2::float4 OR pg_relation_size(c.oid) >= $3::int8))`, args, probed
}

// Plans of new partitions.
//
// PostgreSQL plans a partition it has no statistics for from its size,
// and an empty partition (a period created ahead) is scanned whole rather
// than by row address or index: cheaper, while it is empty. A prepared
// claim keeps the generic plan made then until something invalidates it
// (an ANALYZE of the partition, a partition attached or detached), so
// with autovacuum off the current period's claims would scan its whole
// partition as it fills. Two things prevent it. The store's statements
// carry the current period in a comment, so each period's are prepared
// anew: their plans are made in the period, never before it. And while
// the current period's partition is small (under plannedPages pages) and
// has no statistics of plannedRows rows or more, the store plans its
// statements per execution (as on a young table, plans.go), so the plans
// prepared for the period are made once the partition has the size that
// makes PostgreSQL reach its rows by address and index. The retention
// leader also gives the partition statistics (Partitions.Maintain), as
// autovacuum does where it runs.
const (
	plannedRows  = 1000
	plannedPages = 64
)

// sawCurrent notes the current period (the partition holding now -
// floorLag) and whether a plan made now would reach its rows by address
// and index: planned names the partitions for which it would.
func (s *Store) sawCurrent(parts []PartitionInfo, now time.Time, planned []string) {
	lag := now.Add(-time.Second)
	for _, pi := range parts {
		if !pi.Default && !pi.From.IsZero() && !pi.From.After(lag) && pi.To.After(lag) {
			s.partYoung.Store(!slices.Contains(planned, pi.Name))
			s.setPeriod(pi)
			return
		}
	}
	s.partYoung.Store(false) // no partition for now: rows go to the default one
}

// periodSQL is the partitioned layout's statements for one period: the
// same texts, commented with the period's partition, so that pgx
// prepares them anew, and PostgreSQL plans them anew, for each period.
// one holds the claims on the period's partition itself (claimOneSQL),
// for a created_at range of exactly [from, to); oneByTID the settlements
// by address of a lease whose rows were all created in [from, to).
type periodSQL struct {
	period   string
	from, to time.Time
	sql      partSQL
	one      claimTexts
	oneByTID tidSQL
}

// claimTexts are the three claim statements of one table.
type claimTexts struct{ claim, claimDest, claimSlot string }

// oneClaims is the claims on the current period's partition when the
// created_at range r is that period alone, nil otherwise (and before the
// store has seen a period).
func (s *Store) oneClaims(r createdRange) *claimTexts {
	p := s.partNow.Load()
	if p == nil || !r.floor.Valid || r.floor.InfinityModifier != pgtype.Finite || !r.floor.Time.Equal(p.from) ||
		!r.ceiling.Valid || r.ceiling.InfinityModifier != pgtype.Finite || !r.ceiling.Time.Equal(p.to) {
		return nil
	}
	return &p.one
}

// oneSettles is the settlements by address on the current period's
// partition when every row of a lease (its created_at bounds b) was
// created in that period, nil otherwise.
//
// On the partitioned table PostgreSQL plans every settlement anew once
// the table has a dozen partitions: it prices a generic plan as if it
// read them all (createdWithin prunes only as the executor starts), so
// the custom plan, pruned while planning, always looks cheaper. On the
// partition it keeps a generic plan, as on the plain layout. Planning
// every settlement cost a relay draining 300,000 events beside ten days
// of retained ones about 0.6 µs per event of PostgreSQL's CPU, 4 % more
// than on a table of four partitions, where the generic plan won. A row
// whose created_at says it is in the partition is there (the partition
// constraint); one moved out since the claim (a foreign writer changing
// its created_at) is not at its address, and is settled by ID as any row
// not found at its address is.
func (s *Store) oneSettles(b createdBounds) *tidSQL {
	p := s.partNow.Load()
	if p == nil || !b.lo.Valid || b.lo.InfinityModifier != pgtype.Finite || b.lo.Time.Before(p.from) ||
		!b.hi.Valid || b.hi.InfinityModifier != pgtype.Finite || !b.hi.Time.Before(p.to) {
		return nil
	}
	return &p.oneByTID
}

// partStmts is the partitioned layout's statements for the current
// period (the untagged ones until the store has seen one).
func (s *Store) partStmts() *partSQL {
	if p := s.partNow.Load(); p != nil {
		return &p.sql
	}
	return &s.part
}

// setPeriod makes the statements of the period of partition cur the
// store's.
func (s *Store) setPeriod(cur PartitionInfo) {
	current := cur.Name
	if p := s.partNow.Load(); p != nil && p.period == current && p.from.Equal(cur.From) && p.to.Equal(cur.To) {
		return
	}
	tag := "/* outboxkit: " + current + " */\n"
	b := s.part
	for _, q := range []*string{&b.claim, &b.claimDest, &b.claimSlot, &b.settle, &b.publish, &b.delete, &b.settleDelete, &b.prune,
		&b.byTID.settle, &b.byTID.publish, &b.byTID.delete, &b.byTID.settleDelete} {
		*q = tag + *q
	}
	part := pgx.Identifier{s.n.schema, current}.Sanitize()
	one := claimTexts{
		claim:     tag + claimOneSQL(s.n, part, s.cfg.Ordering, false),
		claimDest: tag + claimOneSQL(s.n, part, s.cfg.Ordering, true),
		claimSlot: tag + claimSlotOneSQL(s.n, part),
	}
	// The settlements by address with the partition for the table: the
	// same statements and arguments (their created_at bounds are then
	// only a filter).
	pn := s.n
	pn.outbox = part
	oneByTID := tidSQL{
		settle:       tag + settleTIDPartSQL(pn),
		publish:      tag + publishTIDPartSQL(pn),
		delete:       tag + deleteTIDPartSQL(pn),
		settleDelete: tag + settleDeleteTIDPartSQL(pn),
	}
	s.partNow.Store(&periodSQL{period: current, from: cur.From, to: cur.To, sql: b, one: one, oneByTID: oneByTID})
}
