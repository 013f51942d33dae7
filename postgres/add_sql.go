package postgres

// Add's SQL (add.go): the INSERT of a batch of events, with or without
// per-aggregate sequences and the NOTIFY wake-up, and its one-event forms.

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
