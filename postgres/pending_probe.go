package postgres

// pendingProbe is a scalar subquery over one partition (part, quoted):
// true when it holds a pending row, NULL when it holds none. It walks the
// partition's pending index and stops at the first entry, whatever the
// partition's statistics say.
//
// It is not an EXISTS. PostgreSQL drops an EXISTS subquery's ORDER BY and
// LIMIT (only whether a row exists matters to it) and plans what is left
// from the statistics: when they were taken while a backlog was pending,
// as a sequential scan expecting a pending row on the first pages. Once
// the backlog is settled such a scan reads the whole partition to find
// none: a daily partition's gigabytes at every search for the claim
// floor (createdfloor.go), about 22,000 pages of a partition of a million
// rows each time in the partitions benchmark. A scalar subquery keeps its
// ORDER BY and LIMIT, and the cheapest way to its first row in that
// order is the pending index.
func pendingProbe(part string) string {
	return `(SELECT true FROM ` + part + ` WHERE published_at IS NULL AND dead_at IS NULL ORDER BY available_at, pos LIMIT 1)`
}
