package postgres

import "strings"

// The store's SQL. Each text is built once per Store from validated, quoted
// names (the only things ever spliced in); values always travel as
// parameters.
//
// "now" is COALESCE($n::timestamptz, now()): the database clock unless the
// relay runs on a test clock and passes its time. One text serves both, so
// one prepared statement does.

// eventColumns are the columns a claimed event is read from, in the order
// eventScanner expects.
const eventColumns = `id, event_type, schema_version, source, aggregate_type, aggregate_id, sequence,
	payload, headers, destination, created_at, available_at, attempts`

// recordColumns add the bookkeeping columns operators look at.
const recordColumns = eventColumns + `, published_at, dead_at, lease_until, last_error`

// unnestEvents turns the parameter arrays Add sends into rows, in the order
// given (ord keeps it through joins and sorts).
const unnestEvents = `unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::int8[],
	$8::jsonb[], $9::jsonb[], $10::text[], $11::timestamptz[], $12::timestamptz[])
	WITH ORDINALITY AS u(id, event_type, schema_version, source, aggregate_type, aggregate_id, sequence,
	payload, headers, destination, created_at, available_at, ord)`

const insertColumns = `(id, event_type, schema_version, source, aggregate_type, aggregate_id, sequence,
	payload, headers, destination, created_at, available_at)`

// addSQL inserts a batch of events in one statement. ORDER BY u.ord makes the
// identity column (pos) follow the caller's order. A zero AvailableAt means
// CreatedAt (core.Event's contract), and a zero CreatedAt the transaction's
// now().
func addSQL(n names, notify bool) string {
	ins := `INSERT INTO ` + n.outbox + ` ` + insertColumns + `
SELECT u.id, u.event_type, u.schema_version, u.source, u.aggregate_type, u.aggregate_id, u.sequence,
	u.payload, u.headers, u.destination, COALESCE(u.created_at, now()), COALESCE(u.available_at, u.created_at, now())
FROM ` + unnestEvents + `
ORDER BY u.ord`
	if !notify {
		return ins
	}
	// The data-modifying CTE runs to completion whatever the outer query
	// reads; the outer SELECT sends the wake-up in the same round trip.
	return "WITH ins AS (\n" + ins + "\n)\nSELECT pg_notify($13, '')"
}

// addOrderedSQL also assigns per-aggregate sequences: it bumps each
// aggregate's counter by its number of events (locking counter rows in key
// order, so two writers cannot deadlock on one another's aggregates) and
// numbers the aggregate's events from the old value, in the caller's order.
// The counter row lock is held until commit, so a concurrent writer of the
// same aggregate waits and continues from the committed value: sequences
// become visible in sequence order.
func addOrderedSQL(n names, notify bool) string {
	s := `WITH u AS MATERIALIZED (
SELECT * FROM ` + unnestEvents + `
), c AS (
SELECT aggregate_type, aggregate_id, count(*) AS n FROM u
WHERE aggregate_id <> ''
GROUP BY aggregate_type, aggregate_id
), bumped AS (
INSERT INTO ` + n.aggregates + ` AS a (aggregate_type, aggregate_id, last_sequence)
SELECT aggregate_type, aggregate_id, n FROM c ORDER BY aggregate_type, aggregate_id
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = a.last_sequence + excluded.last_sequence
RETURNING a.aggregate_type, a.aggregate_id, a.last_sequence
), ins AS (
INSERT INTO ` + n.outbox + ` ` + insertColumns + `
SELECT u.id, u.event_type, u.schema_version, u.source, u.aggregate_type, u.aggregate_id,
	CASE WHEN u.aggregate_id <> '' THEN b.last_sequence - c.n
		+ row_number() OVER (PARTITION BY u.aggregate_type, u.aggregate_id ORDER BY u.ord)
	ELSE u.sequence END,
	u.payload, u.headers, u.destination, COALESCE(u.created_at, now()), COALESCE(u.available_at, u.created_at, now())
FROM u
LEFT JOIN c ON c.aggregate_type = u.aggregate_type AND c.aggregate_id = u.aggregate_id
LEFT JOIN bumped b ON b.aggregate_type = u.aggregate_type AND b.aggregate_id = u.aggregate_id
ORDER BY u.ord
)
`
	if notify {
		return s + "SELECT pg_notify($13, '')"
	}
	return s + "SELECT 1"
}

// addOneSQL is addSQL for the most common call, a single event: a VALUES
// row costs the server noticeably less than unnesting twelve one-element
// arrays. The parameters are addSQL's, as scalars.
func addOneSQL(n names, notify bool) string {
	ins := `INSERT INTO ` + n.outbox + ` ` + insertColumns + `
VALUES ($1::uuid, $2::text, $3::int4, $4::text, $5::text, $6::text, $7::int8, $8::jsonb, $9::jsonb, $10::text,
	COALESCE($11::timestamptz, now()), COALESCE($12::timestamptz, $11::timestamptz, now()))`
	if !notify {
		return ins
	}
	return "WITH ins AS (\n" + ins + "\n)\nSELECT pg_notify($13, '')"
}

// addOneOrderedSQL is addOrderedSQL for a single event with an aggregate.
func addOneOrderedSQL(n names, notify bool) string {
	s := `WITH bumped AS (
INSERT INTO ` + n.aggregates + ` AS a (aggregate_type, aggregate_id, last_sequence)
VALUES ($5::text, $6::text, 1)
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = a.last_sequence + 1
RETURNING a.last_sequence
), ins AS (
INSERT INTO ` + n.outbox + ` ` + insertColumns + `
SELECT $1::uuid, $2::text, $3::int4, $4::text, $5::text, $6::text,
	-- The counter replaces the caller's $7 (never null here); naming $7
	-- keeps the parameters those of addOneSQL.
	COALESCE(b.last_sequence, $7::int8), $8::jsonb, $9::jsonb, $10::text,
	COALESCE($11::timestamptz, now()), COALESCE($12::timestamptz, $11::timestamptz, now())
FROM bumped b
)
`
	if notify {
		return s + "SELECT pg_notify($13, '')"
	}
	return s + "SELECT 1"
}

// claimSQL leases up to $2 due events in one statement. The subquery walks
// the pending index in (available_at, pos) order, locking due rows and
// skipping those another claim has locked; the UPDATE then reaches each
// locked row by its physical address (a TID scan, no index probe) and touches
// only unindexed columns, so it is a HOT update. A join on id instead lets
// the planner pick a hash join over the whole table for large batches. The
// row lock keeps each row version in place until the statement ends; should
// a row still have moved, the TID no longer matches on recheck and the row is
// simply not claimed this time. Parameters: $1 now override, $2 limit, $3
// lease token, $4 lease duration.
//
// With ordering, a row with a sequence is due only when no pending row of its
// aggregate has a lower sequence: a leased or retrying head keeps the rest of
// its aggregate back, a dead-lettered one does not (it is no longer pending).
//
// With byDestination, $5 restricts the claim to one destination (see
// core.ClaimRequest.Destination). It is a separate text rather than an OR on
// an empty parameter, so the common claim's plan carries no dead condition.
func claimSQL(n names, ordered, byDestination bool) string {
	return claimWhere(n, ordered, byDestination, "")
}

// claimSlotSQL is the unordered, any-destination claim restricted to one
// slot of the pending set (migration 005): the sequence picks the slot, and
// the condition matches the slot index's expression so the claim walks that
// index in (available_at, pos) order within the slot.
func claimSlotSQL(n names) string {
	return claimWhere(n, false, false, `
	AND ((o.pos / 64) % 16) = (SELECT nextval('`+n.claimSlot+`') % 16)`)
}

func claimWhere(n names, ordered, byDestination bool, slot string) string {
	head := slot
	if byDestination {
		head = `
	AND o.destination = $5`
	}
	if ordered {
		head += `
	AND (o.sequence IS NULL OR NOT EXISTS (
		SELECT 1 FROM ` + n.outbox + ` p
		WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
			AND p.sequence < o.sequence
			AND p.published_at IS NULL AND p.dead_at IS NULL))`
	}
	return `UPDATE ` + n.outbox + ` t
SET lease_token = CASE WHEN ` + unleasable + ` THEN NULL ELSE $3::uuid END,
	lease_until = CASE WHEN ` + unleasable + ` THEN NULL ELSE COALESCE($1::timestamptz, now()) + $4::interval END,
	attempts = CASE WHEN ` + unleasable + ` THEN t.attempts ELSE greatest(t.attempts, 0) + 1 END,
	dead_at = CASE WHEN ` + unleasable + ` THEN COALESCE($1::timestamptz, now()) ELSE t.dead_at END,
	last_error = CASE WHEN ` + unleasable + ` THEN ` + quoteLiteral(unleasableReason) + ` ELSE t.last_error END
WHERE t.ctid = ANY(ARRAY(
	SELECT o.ctid FROM ` + n.outbox + ` o
	WHERE o.published_at IS NULL AND o.dead_at IS NULL
		AND o.available_at <= COALESCE($1::timestamptz, now())
		AND (o.lease_until IS NULL OR o.lease_until <= COALESCE($1::timestamptz, now()))` + head + `
		AND (SELECT ` + claimLeaseLock + `) IS NOT NULL
	ORDER BY o.available_at, o.pos
	LIMIT $2
	FOR UPDATE SKIP LOCKED))
RETURNING ` + prefixed("t.", eventColumns) + `, t.lease_until, t.pos, t.ctid, t.dead_at IS NOT NULL`
}

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
func addressesByID(n names, ids string) string {
	return `ARRAY(SELECT (SELECT x.ctid FROM ` + n.outbox + ` x WHERE x.id = i.id) FROM unnest(` + ids + `::uuid[]) AS i(id))`
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
	return `(SELECT u.*, (SELECT x.ctid FROM ` + n.outbox + ` x WHERE x.id = u.id) AS tid, $1::uuid AS token
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
WHERE ` + outcomeMatch + `
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
	return `WITH d AS (
` + deleteWhere(n, deleted) + `
), u AS (
` + settleUpdate(n, updated) + `
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

// pruneSQL deletes one bounded batch of published rows, oldest first, through
// the published index. Rows a replay has locked are skipped, not waited for.
// "id = ANY(ARRAY(...))" rather than a join: with a join the planner
// estimates a hash join over the whole table cheaper than a thousand
// primary-key probes, and a prune must never scan the history it is
// trimming.
func pruneSQL(n names) string {
	return `DELETE FROM ` + n.outbox + `
WHERE id = ANY(ARRAY(
	SELECT id FROM ` + n.outbox + `
	WHERE published_at < $1
	ORDER BY published_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED))`
}

// statsSQL reads a snapshot in one statement; age is computed with the
// database clock.
func statsSQL(n names) string {
	return `WITH p AS MATERIALIZED (
SELECT created_at, attempts, lease_until FROM ` + n.outbox + `
WHERE published_at IS NULL AND dead_at IS NULL
)
SELECT
	(SELECT count(*) FROM p),
	(SELECT min(created_at) FROM p),
	(SELECT count(*) FROM p WHERE lease_until > now()),
	(SELECT count(*) FROM ` + n.outbox + ` WHERE dead_at IS NOT NULL),
	(SELECT COALESCE(jsonb_object_agg(attempts, k), '{}') FROM (SELECT attempts, count(*) AS k FROM p GROUP BY attempts) a),
	now()`
}

func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}
