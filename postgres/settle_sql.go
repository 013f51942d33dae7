package postgres

import "strconv"

// Settle's SQL (settle.go): the statements that record a batch's
// outcomes, finding the rows by their claimed address or by ID.

// Outcome kinds as stored in settle's kind array. They are this package's
// own numbers, independent of core's constants.
const (
	kindPublished = 1
	kindRetry     = 2
	kindDead      = 3
	kindReleased  = 4
	kindDeferred  = 5
)

// How a settlement finds its rows. Each event is looked for at one row
// address: the one its claim returned (the lease's Handle, a TID scan with
// no index probe at all) or, failing that, the one its primary key holds
// now. An address is only a hint: the claim's lease update is a HOT
// update, so the leased version normally stays where RETURNING saw it,
// but a table rewrite while the lease is held (VACUUM FULL, CLUSTER,
// pg_repack) moves rows, and then a claimed address can hold another row
// of the same lease, or nothing. So every statement also matches the
// event's ID, and the lease token: the address finds a row, the ID says
// whose outcome it gets, the token whether it may be settled at all.
// Events not found at their claimed address are settled again by ID
// (Store.settleUnmatched).
//
// The statements avoid joins the planner could run as a nested loop
// comparing every row with every outcome: it expects a single row to
// carry the lease token, so "TID scan, then join the outcomes on id" ran
// as such a loop, 55 ms to settle 500 mixed outcomes.

// sameOutcome is the condition of a settlement that gives every event one
// outcome (publish, delete): the rows at the addresses whose ID is one of
// the batch's. A row of the lease found at another event's address gets
// the outcome its own entry asks for, the same one, so the ID need not be
// paired with the address. The membership test is a hashed subquery, one
// lookup per row: "IS TRUE" keeps the planner from turning it into a join
// (see above), and "id = ANY($ids)" would compare each row with every ID
// once the statement is prepared (a generic plan cannot hash a parameter
// array), 2 ms more for 1,000 events than the TID scan itself.
func sameOutcome(addresses, ids string) string {
	return `t.ctid = ANY(` + addresses + `) AND t.lease_token = $1
	AND (t.id IN (SELECT unnest(` + ids + `::uuid[]))) IS TRUE`
}

// addressesByID looks up each ID's current row address in the primary
// key: one probe per ID, as a correlated subquery so the planner cannot
// swap it for a join on id, which for a batch of a few hundred IDs its
// default costs make a sequential scan of every row ever kept.
func addressesByID(n names, ids string) string { return addressesByIDFor(n, ids, false) }

// byIDPart is what the lookup by ID adds on the partitioned layout, where
// an ID is unique within its partition only (partition.go): the row of
// the lease, one at most, so that an ID another partition holds too
// cannot fail the statement ("more than one row returned by a subquery").
func byIDPart(partitioned bool) string {
	if !partitioned {
		return ""
	}
	return ` AND x.lease_token = $1 LIMIT 1`
}

// createdWithin is what a settlement by address adds on the partitioned
// layout: the least and greatest created_at of the lease's rows ($i and
// $i+1, from the claim: rowRefs), so that only the partitions holding
// them are searched. A row address is unique within a partition only; the
// ID and token every statement matches keep a row of another partition at
// the same address from being settled.
//
// On a table of a dozen partitions or more PostgreSQL plans a settlement
// by address anew at every execution (it prices the generic plan as if it
// read every partition); with the bounds as plain parameters it prunes
// the partitions while planning, so it plans for the one or two
// partitions the lease's rows are in, however many the table has. When
// they are all in the current period's partition, the store names the
// partition instead, where PostgreSQL keeps a generic plan (oneSettles).
func createdWithin(i int) string {
	return `
	AND t.created_at >= $` + strconv.Itoa(i) + `::timestamptz AND t.created_at <= $` + strconv.Itoa(i+1) + `::timestamptz`
}

// The per-event arrays of a mixed settlement.
const (
	outcomeArrays = `$3::uuid[], $4::int4[], $5::text[], $6::int8[]`
	outcomeCols   = `id, kind, error, delay_us`
)

// outcomesByTID is the row set of a mixed settlement by claimed address:
// one entry per event with its outcome, its address (tids) and the token
// it may be settled under, matched by outcomeMatch. The token travels in
// the row set, behind OFFSET 0 (which keeps the planner from folding it
// back into a condition on the table), so no estimate of how many rows
// carry it can steer the plan: it is a nested loop over the entries with
// one TID fetch each, or on a small table a hash join with a scan of it.
func outcomesByTID(tids string) string {
	return `(SELECT u.*, $1::uuid AS token
	FROM unnest(` + outcomeArrays + `, ` + tids + `::tid[]) AS u(` + outcomeCols + `, tid) OFFSET 0) s`
}

// outcomesByID is outcomesByTID with each address looked up by primary
// key, as in addressesByID.
func outcomesByID(n names) string {
	return outcomesByIDFor(n, false)
}

func outcomesByIDFor(n names, partitioned bool) string {
	return `(SELECT u.*, (SELECT x.ctid FROM ` + n.outbox + ` x WHERE x.id = u.id` + byIDPart(partitioned) + `) AS tid, $1::uuid AS token
	FROM unnest(` + outcomeArrays + `) AS u(` + outcomeCols + `) OFFSET 0) s`
}

// outcomeMatch pairs each row with its event's entry in the row set s.
const outcomeMatch = `t.ctid = s.tid AND t.id = s.id AND t.lease_token = s.token`

// settleSQL settles a batch of outcomes in one statement, only on rows whose
// lease token is still $1; RETURNING tells which rows that was. Columns left
// alone keep their value, which PostgreSQL recognises, so a release (lease
// columns and attempts only) stays a HOT update. Parameters: $1 token, $2
// now override, $3 ids, $4 kinds, $5 errors, $6 delays in microseconds.
func settleSQL(n names) string {
	return settleUpdate(n, outcomesByID(n))
}

// settleTIDSQL is settleSQL finding rows by address: $7 holds the row
// address of each ID in $3.
func settleTIDSQL(n names) string {
	return settleUpdate(n, outcomesByTID("$7"))
}

// settleUpdate's attempts arithmetic cannot overflow and never leaves a
// negative count, whatever the row holds: giving an attempt back starts
// from at least one (greatest(attempts - 1, 0) fails on the smallest
// integer), and the other outcomes keep the count.
func settleUpdate(n names, outcomes string) string {
	return settleUpdateWhere(n, outcomes, "")
}

// settleUpdateWhere is settleUpdate with more conditions on the rows.
func settleUpdateWhere(n names, outcomes, more string) string {
	return `UPDATE ` + n.outbox + ` t
SET published_at = CASE WHEN s.kind = 1 THEN COALESCE($2::timestamptz, now()) ELSE t.published_at END,
	dead_at = CASE WHEN s.kind = 3 THEN COALESCE($2::timestamptz, now()) ELSE t.dead_at END,
	available_at = CASE WHEN s.kind IN (2, 5)
		THEN COALESCE($2::timestamptz, now()) + s.delay_us * interval '1 microsecond'
		ELSE t.available_at END,
	attempts = CASE WHEN s.kind IN (4, 5) THEN greatest(t.attempts, 1) - 1 ELSE greatest(t.attempts, 0) END,
	last_error = CASE WHEN s.kind IN (2, 3, 5) THEN s.error ELSE t.last_error END,
	lease_token = NULL,
	lease_until = NULL
FROM ` + outcomes + `
WHERE ` + outcomeMatch + more + `
RETURNING t.id`
}

// deleteSQL is publishSQL for Config.DeletePublished: a published event's
// row is deleted, which costs less than writing a new row version (no new
// tuple, no index entries). Parameters: $1 token, $2 ids.
func deleteSQL(n names) string {
	return deleteWhere(n, sameOutcome(addressesByID(n, "$2"), "$2"))
}

// deleteTIDSQL is deleteSQL by row address: $2 holds the addresses of the
// IDs in $3.
func deleteTIDSQL(n names) string {
	return deleteWhere(n, sameOutcome("$2::tid[]", "$3"))
}

func deleteWhere(n names, rows string) string {
	return `DELETE FROM ` + n.outbox + ` t
WHERE ` + rows + `
RETURNING t.id`
}

// settleDeleteSQL is settleSQL for Config.DeletePublished: $7 holds the
// published IDs, deleted; $3 to $6 the other outcomes, updated. Two
// data-modifying CTEs in one statement, on disjoint rows: an event has one
// outcome, and each statement touches a row only for its own ID.
func settleDeleteSQL(n names) string {
	return settleDeleteWhere(n, sameOutcome(addressesByID(n, "$7"), "$7"), outcomesByID(n))
}

// settleDeleteTIDSQL is settleDeleteSQL by row address: $7 holds the
// addresses of the rows to delete and $9 their IDs, $8 the addresses of
// the IDs in $3.
func settleDeleteTIDSQL(n names) string {
	return settleDeleteWhere(n, sameOutcome("$7::tid[]", "$9"), outcomesByTID("$8"))
}

func settleDeleteWhere(n names, deleted, updated string) string {
	return settleDeleteWhereMore(n, deleted, updated, "")
}

// settleDeleteWhereMore is settleDeleteWhere with more conditions on the
// updated rows.
func settleDeleteWhereMore(n names, deleted, updated, more string) string {
	return `WITH d AS (
` + deleteWhere(n, deleted) + `
), u AS (
` + settleUpdateWhere(n, updated, more) + `
)
SELECT id FROM d UNION ALL SELECT id FROM u`
}

// publishSQL is settleSQL for the common batch where every event was
// published: no per-row CASE, and a single array to send. Parameters: $1
// token, $2 now override, $3 ids.
func publishSQL(n names) string {
	return publishWhere(n, sameOutcome(addressesByID(n, "$3"), "$3"))
}

// publishTIDSQL is publishSQL by row address: $3 holds the addresses of
// the IDs in $4.
func publishTIDSQL(n names) string {
	return publishWhere(n, sameOutcome("$3::tid[]", "$4"))
}

func publishWhere(n names, rows string) string {
	return `UPDATE ` + n.outbox + ` t
SET published_at = COALESCE($2::timestamptz, now()), lease_token = NULL, lease_until = NULL
WHERE ` + rows + `
RETURNING t.id`
}

// The partitioned layout's settlements (partition.go). By address, each
// takes two more parameters after its own, the least and greatest
// created_at of the lease's rows (createdWithin); by ID, the lookup keeps
// to the lease's rows (byIDPart).
func settlePartSQL(n names) string { return settleUpdate(n, outcomesByIDFor(n, true)) }

func publishPartSQL(n names) string {
	return publishWhere(n, sameOutcome(addressesByIDFor(n, "$3", true), "$3"))
}

func deletePartSQL(n names) string {
	return deleteWhere(n, sameOutcome(addressesByIDFor(n, "$2", true), "$2"))
}

func settleDeletePartSQL(n names) string {
	return settleDeleteWhere(n, sameOutcome(addressesByIDFor(n, "$7", true), "$7"), outcomesByIDFor(n, true))
}

func settleTIDPartSQL(n names) string {
	return settleUpdateWhere(n, outcomesByTID("$7"), createdWithin(8))
}

func publishTIDPartSQL(n names) string {
	return publishWhere(n, sameOutcome("$3::tid[]", "$4")+createdWithin(5))
}

func deleteTIDPartSQL(n names) string {
	return deleteWhere(n, sameOutcome("$2::tid[]", "$3")+createdWithin(4))
}

func settleDeleteTIDPartSQL(n names) string {
	return settleDeleteWhereMore(n, sameOutcome("$7::tid[]", "$9")+createdWithin(10), outcomesByTID("$8"), createdWithin(10))
}

func addressesByIDFor(n names, ids string, partitioned bool) string {
	return `ARRAY(SELECT (SELECT x.ctid FROM ` + n.outbox + ` x WHERE x.id = i.id` + byIDPart(partitioned) + `) FROM unnest(` + ids + `::uuid[]) AS i(id))`
}
