package postgres

// Accept's SQL (accept.go): the idempotent INSERT of delivered events into
// an inbox table.
//
// It differs from Add's on purpose. The event is kept as its producer
// wrote it: its ID is the key (ON CONFLICT (id) DO NOTHING makes a
// redelivery a no-op), and its Sequence is the producer's, written as given
// and never renumbered from <table>_aggregates, which an inbox does not use.
// The ordered claim needs nothing more: it compares the sequence column of
// an aggregate's pending rows, whoever numbered them. available_at is the
// inbox's own now(), never the producer's time: a row written with an
// available_at in the past would lie below the claim floor (claimfloor.go)
// and wait for the next search from the beginning of the pending set.
//
// The statement's command tag counts the rows written, so Accept learns
// how many events were new in the same round trip: INSERT's tag without a
// wake-up, and with NotifyInTransaction a SELECT over the inserted rows
// that sends one notification per row, which PostgreSQL folds into one per
// transaction (the payload is constant).

const acceptColumns = `(id, event_type, schema_version, source, aggregate_type, aggregate_id, sequence,
	payload, headers, destination, created_at, available_at)`

// acceptSQL writes a batch: the parameters are Add's arrays without
// available_at, and $12 the notification channel.
func acceptSQL(n names, notify bool) string {
	ins := `INSERT INTO ` + n.outbox + ` ` + acceptColumns + `
SELECT u.id, u.event_type, u.schema_version, u.source, u.aggregate_type, u.aggregate_id, u.sequence,
	u.payload, u.headers, u.destination, COALESCE(u.created_at, now()), now()
FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::int8[],
	$8::jsonb[], $9::jsonb[], $10::text[], $11::timestamptz[])
	WITH ORDINALITY AS u(id, event_type, schema_version, source, aggregate_type, aggregate_id, sequence,
	payload, headers, destination, created_at, ord)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING`
	return withAcceptNotify(ins, notify)
}

// acceptOneSQL is acceptSQL for a single event, the receiver's case, as a
// VALUES row (cheaper for the server than unnesting one-element arrays).
func acceptOneSQL(n names, notify bool) string {
	ins := `INSERT INTO ` + n.outbox + ` ` + acceptColumns + `
VALUES ($1::uuid, $2::text, $3::int4, $4::text, $5::text, $6::text, $7::int8, $8::jsonb, $9::jsonb, $10::text,
	COALESCE($11::timestamptz, now()), now())
ON CONFLICT (id) DO NOTHING`
	return withAcceptNotify(ins, notify)
}

func withAcceptNotify(ins string, notify bool) string {
	if !notify {
		return ins
	}
	return "WITH ins AS (\n" + ins + "\nRETURNING 1\n)\nSELECT pg_notify($12, '') FROM ins"
}
