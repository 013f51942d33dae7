package postgres

import "strings"

// The store's SQL. Each text is built once per Store from validated, quoted
// names (the only things ever spliced in); values always travel as
// parameters.
//
// "now" is COALESCE($n::timestamptz, now()): the database clock unless the
// relay runs on a test clock and passes its time. One text serves both, so
// one prepared statement does.
//
// The statements live beside their concept (add_sql.go, claim_sql.go,
// settle_sql.go, ops_sql.go); this file holds what they share: the
// conventions above, the column lists and prefixed.

// eventColumns are the columns a claimed event is read from, in the order
// eventScanner expects.
const eventColumns = `id, event_type, schema_version, source, aggregate_type, aggregate_id, sequence,
	payload, headers, destination, created_at, available_at, attempts`

// recordColumns add the bookkeeping columns operators look at.
const recordColumns = eventColumns + `, published_at, dead_at, lease_until, last_error`

func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}
