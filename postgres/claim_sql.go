package postgres

import "fmt"

// The claim's SQL (claim.go): the leasing statement and its slot form, the
// lease lock, the give-back of an abandoned claim (abandon.go), and the
// rule for rows a claim cannot lease.

// claimSQL leases up to $2 due events in one statement. The subquery walks
// the pending index in (available_at, pos) order from the claim floor ($5,
// $6; claimfloor.go), locking due rows and skipping those another claim has
// locked; the UPDATE then reaches each locked row by its physical address (a
// TID scan, no index probe) and touches only unindexed columns, so it is a
// HOT update. A join on id instead lets the planner pick a hash join over
// the whole table for large batches. The row lock keeps each row version in
// place until the statement ends; should a row still have moved, the TID no
// longer matches on recheck and the row is simply not claimed this time.
// Parameters: $1 now override, $2 limit, $3 lease token, $4 lease duration,
// $5 and $6 the floor's available_at and pos.
//
// Each returned row also carries the floor for the next claim.
//
// With ordering, a row with a sequence is due only when no pending row of its
// aggregate has a lower sequence: a leased or retrying head keeps the rest of
// its aggregate back, a dead-lettered one does not (it is no longer pending).
//
// With byDestination, $7 restricts the claim to one destination (see
// core.ClaimRequest.Destination). It is a separate text rather than an OR on
// an empty parameter, so the common claim's plan carries no dead condition.
func claimSQL(n names, ordered, byDestination bool) string {
	return claimWhere(n, n.outbox, ordered, byDestination, "", false)
}

// claimSlotSQL is the unordered, any-destination claim restricted to one
// slot of the pending set (migration 005): the sequence picks the slot, and
// the condition matches the slot index's expression so the claim walks that
// index in (available_at, pos) order within the slot, from the floor.
func claimSlotSQL(n names) string {
	return claimWhere(n, n.outbox, false, false, slotCond(n), false)
}

// claimPartSQL and claimSlotPartSQL are claimSQL and claimSlotSQL for the
// partitioned layout (partition.go), which claimPartitioned explains.
func claimPartSQL(n names, ordered, byDestination bool) string {
	return claimWhere(n, n.outbox, ordered, byDestination, "", true)
}

func claimSlotPartSQL(n names) string {
	return claimWhere(n, n.outbox, false, false, slotCond(n), true)
}

// claimOneSQL and claimSlotOneSQL are claimPartSQL and claimSlotPartSQL
// on one partition, part (qualified): the claim of a partitioned layout
// whose created_at range is one period (createdfloor.go), as it is
// whenever nothing older is pending.
//
// The statement on the partitioned table costs a plan over every
// partition: PostgreSQL prices a generic plan as if it read them all
// (pruning as the executor starts is not in its estimate), so with more
// than a few partitions it prefers a custom plan of every claim, planned
// for the one partition left, about 0.45 ms a claim with 14 partitions,
// a third of the claim. On the partition itself the claim is the plain
// layout's statement in all but its conditions: PostgreSQL keeps its
// generic plan, and the number of partitions the table has costs the
// claim nothing. Its rows' tableoid and created_at are the partition's,
// so the settlements that follow find them as they find any claim's
// (rowRefs). The ordering condition still reads the whole table: an
// aggregate's earlier events may be in earlier periods.
func claimOneSQL(n names, part string, ordered, byDestination bool) string {
	return claimWhere(n, part, ordered, byDestination, "", true)
}

func claimSlotOneSQL(n names, part string) string {
	return claimWhere(n, part, false, false, slotCond(n), true)
}

func slotCond(n names) string {
	return `
		AND ((o.pos / 64) % 16) = (SELECT nextval('` + n.claimSlot + `') % 16)`
}

// The floor condition: a row comparison, so the claim's index scan starts
// at the floor rather than filtering from the head of the index.
const (
	claimFloorCond = `(o.available_at, o.pos) >= ($5::timestamptz, $6::int8)`
	// floorLag is how far behind the database's clock the floor stays
	// (claimfloor.go): rows of transactions that commit within it of
	// their start are never below the floor.
	floorLag = `now() - interval '1 second'`
)

// claimPartitioned is how a claim on the partitioned layout finds the
// rows it locked. A row address (ctid) is unique within one partition
// only: the plain claim's "t.ctid = ANY(the addresses locked)" would, on
// a partitioned table, also lease the rows of other partitions that sit
// at those addresses, locked or not, pending or not. So the locked rows
// (c) bring their partition (tableoid) and created_at too: the update
// fetches the addresses only in the partitions that hold the batch's
// creation times (pruned while the statement runs, from c's least and
// greatest created_at), and keeps the rows whose (partition, address) is
// one of c's, a hashed lookup. It returns each row's created_at as
// stored, so that Settle can be pruned the same way (rowRefs).
//
// Its three scans (the floor probe f, the locking c, the update) also keep
// to the rows created from the store's created_at floor on, the claim's
// last parameter (createdfloor.go), so the partitions of periods with
// nothing pending are pruned before the claim is planned or run.
func claimPartitioned(created string) string {
	return `
WHERE t.ctid = ANY(ARRAY(SELECT c.tid FROM c))
	AND t.created_at >= ` + created + `
	AND t.created_at >= (SELECT min(c.created_at) FROM c) AND t.created_at <= (SELECT max(c.created_at) FROM c)
	AND ((t.tableoid, t.ctid) IN (SELECT c.rel, c.tid FROM c)) IS TRUE`
}

// claimWhere builds every claim: on table (the outbox table, or one of
// its partitions: claimOneSQL), ordered, for one destination, restricted
// to a slot, in the partitioned layout's form.
func claimWhere(n names, table string, ordered, byDestination bool, slot string, partitioned bool) string {
	head := slot
	if byDestination {
		head = `
		AND o.destination = $7`
	}
	if ordered {
		head += `
		AND (o.sequence IS NULL OR NOT EXISTS (
			SELECT 1 FROM ` + n.outbox + ` p
			WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
				AND p.sequence < o.sequence
				AND p.published_at IS NULL AND p.dead_at IS NULL))`
	}
	// The partitioned layout's created_at floor: its last parameter.
	var created, since string
	if partitioned {
		// A plain parameter: PostgreSQL prunes the partitions before it
		// plans a custom plan of the claim (which it picks whenever the
		// statistics say many rows are pending: the generic plan's
		// estimate of LIMIT $2 is large), and as the executor starts for
		// its generic plan, so neither plans nor opens the partitions of
		// periods with nothing pending. (As a stable expression or a
		// subquery's value, the floor would be pruned only as the
		// statement ran, and each custom plan would plan every
		// partition: 1.3 ms with 14 partitions against 0.4 ms.)
		floor, ceiling := "$7::timestamptz", "$8::timestamptz"
		if byDestination {
			floor, ceiling = "$8::timestamptz", "$9::timestamptz"
		}
		created = floor + " AND %s.created_at < " + ceiling
		since = `
		AND o.created_at >= ` + fmt.Sprintf(created, "o")
	}
	locked := `FROM ` + table + ` o
	WHERE o.published_at IS NULL AND o.dead_at IS NULL
		AND ` + claimFloorCond + since + `
		AND o.available_at <= COALESCE($1::timestamptz, now())
		AND (o.lease_until IS NULL OR o.lease_until <= COALESCE($1::timestamptz, now()))` + head + `
		AND (SELECT ` + claimLeaseLock + `) IS NOT NULL
	ORDER BY o.available_at, o.pos
	LIMIT $2
	FOR UPDATE SKIP LOCKED`
	with, where, returning := `WITH `+floorProbe(n, "$5", "$6"), `
WHERE t.ctid = ANY(ARRAY(
	SELECT o.ctid `+locked+`))`, ""
	if partitioned {
		with = `WITH ` + floorProbeSince(table, "$5", "$6", fmt.Sprintf(created, "p")) + `, c AS MATERIALIZED (
	SELECT o.ctid AS tid, o.tableoid AS rel, o.created_at ` + locked + `
)`
		where, returning = claimPartitioned(fmt.Sprintf(created, "t")), `, t.created_at`
	}
	return with + `
UPDATE ` + table + ` t
SET lease_token = CASE WHEN ` + unleasable + ` THEN NULL ELSE $3::uuid END,
	lease_until = CASE WHEN ` + unleasable + ` THEN NULL ELSE COALESCE($1::timestamptz, now()) + $4::interval END,
	attempts = CASE WHEN ` + unleasable + ` THEN t.attempts ELSE greatest(t.attempts, 0) + 1 END,
	dead_at = CASE WHEN ` + unleasable + ` THEN COALESCE($1::timestamptz, now()) ELSE t.dead_at END,
	last_error = CASE WHEN ` + unleasable + ` THEN ` + quoteLiteral(unleasableReason) + ` ELSE t.last_error END` + where + `
RETURNING ` + prefixed("t.", eventColumns) + `, t.lease_until, t.pos, t.ctid, t.dead_at IS NOT NULL,
	` + nextFloor + returning
}

// floorProbe is the CTE f: the first pending row at or after the floor
// (at, pos), leased or not, in the statement's snapshot. In a claim, that
// snapshot does not see the claim's own update, so the rows it leases
// count as pending.
func floorProbe(n names, at, pos string) string {
	return floorProbeSince(n.outbox, at, pos, "")
}

// floorProbeSince is floorProbe on table (the outbox table or one of its
// partitions) keeping to rows created from created on (the partitioned
// layout's claim; "" for none).
func floorProbeSince(table, at, pos, created string) string {
	since := ""
	if created != "" {
		since = `
		AND p.created_at >= ` + created
	}
	return `f AS MATERIALIZED (
	SELECT p.available_at, p.pos FROM ` + table + ` p
	WHERE p.published_at IS NULL AND p.dead_at IS NULL
		AND (p.available_at, p.pos) >= (` + at + `::timestamptz, ` + pos + `::int8)` + since + `
	ORDER BY p.available_at, p.pos
	LIMIT 1
)`
}

// nextFloor is the floor for the next claim, from f: the first pending
// row, or floorLag if that is earlier (or nothing is pending). A claim
// returns it with every row (one that leased nothing returns none).
const nextFloor = `COALESCE((SELECT f.available_at FROM f WHERE f.available_at <= ` + floorLag + `), ` + floorLag + `),
	COALESCE((SELECT f.pos FROM f WHERE f.available_at <= ` + floorLag + `), ` + minFloorPos + `)`

// floorSQL finds the floor from ($1, $2) without claiming: the store's
// search from the beginning of the pending set (claimfloor.go). It also
// says whether the table is partitioned ($3 is its qualified name;
// layout.go).
func floorSQL(n names) string {
	return `WITH ` + floorProbe(n, "$1", "$2") + `
SELECT ` + nextFloor + `,
	COALESCE((SELECT c.relkind = 'p' FROM pg_class c WHERE c.oid = to_regclass($3::text)), false)`
}

// minFloorPos is the smallest pos: a floor at (t, minFloorPos) starts at
// the first row with available_at t.
const minFloorPos = `'-9223372036854775808'::int8`

// Every claim takes a transaction-level advisory lock on its lease token
// before it leases a row (a one-time filter of the claim's subquery) and
// holds it until its transaction ends. A release of an abandoned claim
// (releaseSQL) takes the same lock first, so it waits for a claim still
// running on the server (its client gave up, not the server) to commit or
// roll back, and then sees its rows. The two-integer form with a class of
// its own ("obxk") keeps the keys apart from other advisory locks.
const (
	leaseLockClass = "1868724331"
	claimLeaseLock = `pg_advisory_xact_lock(` + leaseLockClass + `, hashtext($3::uuid::text))`
	// leaseLockSQL takes the lock of token $1 in a statement of its own,
	// reading no void column (the driver cannot scan one).
	leaseLockSQL = `SELECT 1 FROM (SELECT pg_advisory_xact_lock(` + leaseLockClass + `, hashtext($1::uuid::text))) l`
)

// releaseSQL gives back what a claim leased under token $1 that its caller
// never received (Store.abandon): lease cleared and the attempt not
// charged, as for a released event, except the events whose IDs are in $4
// (the part of the batch the caller does hold). There is no index on the
// token, so it walks the pending index over what was due at the claim ($2
// is its now override) and stops once it found $3 rows, the claim's limit:
// under a backlog the claim took rows near the head of that order.
func releaseSQL(n names) string {
	return `UPDATE ` + n.outbox + ` t
SET lease_token = NULL, lease_until = NULL, attempts = greatest(t.attempts, 1) - 1
WHERE t.ctid = ANY(ARRAY(
	SELECT o.ctid FROM ` + n.outbox + ` o
	WHERE o.published_at IS NULL AND o.dead_at IS NULL
		AND o.available_at <= COALESCE($2::timestamptz, now())
		AND o.lease_token = $1 AND NOT (o.id = ANY($4::uuid[]))
	ORDER BY o.available_at, o.pos
	LIMIT $3))
	AND t.lease_token = $1`
}

// A claim must not fail on any row's values: the row it fails on is the
// oldest due one, so every later claim meets it again and nothing is ever
// relayed. The one value that can fail the claim statement is an attempts
// count at the integer limit (only a foreign writer can set it): counting
// the claim would overflow. Such a row is dead-lettered by the claim
// itself, with unleasableReason as its last error, and left out of the
// batch; the rest of the batch is leased as usual. A negative count (which
// migration 006 refuses, but rows written before it may hold) counts from
// zero, so it buys no extra retries.
//
// Nothing else in the claim computes with a row's values: the lease expiry
// is the claim's own now plus the lease, and every other column is read,
// not computed (timestamps of 'infinity', any jsonb payload, headers that
// are not strings: eventScanner copes with each).
const (
	unleasable       = `t.attempts >= 2147483647`
	unleasableReason = `outboxkit/postgres: attempts is 2147483647, the largest count the column holds, so the claim could not count another attempt and dead-lettered the event; find the writer that set it, then replay the event (a replay resets attempts)`
)
