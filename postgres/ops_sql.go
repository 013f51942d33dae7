package postgres

// The maintenance statements built once per Store (ops.go): Prune's
// bounded delete and the Stats snapshot.

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

// prunePartSQL is pruneSQL for the partitioned layout, where an ID is
// unique within its partition only (partition.go): the outer DELETE keeps
// to published rows, so that a pending row of another partition with the
// ID of a published one is not deleted with it. Retention on that layout
// drops whole partitions instead (partitions.go), and prunes only the
// partitions it cannot drop, one at a time (partitionPruneSQL).
func prunePartSQL(n names) string {
	return `DELETE FROM ` + n.outbox + `
WHERE published_at < $1 AND id = ANY(ARRAY(
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
