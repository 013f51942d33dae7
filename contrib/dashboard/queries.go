package dashboard

import (
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The dashboard's own statements. Identifiers come only from validated,
// quoted Target names (pgx.Identifier); every value is a parameter.

// tableNames are one target's quoted identifiers.
type tableNames struct {
	outbox        string // "schema"."table"
	schema, table string // unquoted
	// Index names as EXPLAIN prints them (unqualified, unquoted).
	pkIdx, pendingIdx, publishedIdx, deadIdx string
}

func newTableNames(schema, table string) tableNames {
	return tableNames{
		outbox:       pgx.Identifier{schema, table}.Sanitize(),
		schema:       schema,
		table:        table,
		pkIdx:        table + "_pkey",
		pendingIdx:   table + "_pending_idx",
		publishedIdx: table + "_published_idx",
		deadIdx:      table + "_dead_idx",
	}
}

// pendingByDestinationSQL counts the pending set per destination through
// the pending index's predicate: pending, leased (a live lease) and the
// oldest creation time.
func pendingByDestinationSQL(n tableNames) string {
	return `SELECT destination, count(*), count(*) FILTER (WHERE lease_until > now()), min(created_at)
FROM ` + n.outbox + `
WHERE published_at IS NULL AND dead_at IS NULL
GROUP BY destination`
}

// deadByDestinationSQL counts dead letters per destination, through the
// dead-letter index.
func deadByDestinationSQL(n tableNames) string {
	return `SELECT destination, count(*) FROM ` + n.outbox + `
WHERE dead_at IS NOT NULL
GROUP BY destination`
}

// latencyBucketsPerDoubling is the latency histogram's resolution: four
// buckets per doubling, so a percentile read from it is within 19 % of
// the exact one.
const latencyBucketsPerDoubling = 4

// publishedHistorySQL reads the events published since $1 (a minute
// number, Unix seconds / 60) through the published index, counted per
// minute, destination and commit → publish latency bucket (bucket b holds
// latencies from 2^(b/4) ms): the charts' rates and percentiles come from
// these counts, never from sorting the rows.
func publishedHistorySQL(n tableNames) string {
	return `SELECT m, destination, b, count(*) FROM (
	SELECT floor(date_part('epoch', published_at) / 60)::bigint AS m, destination,
		floor(` + strconv.Itoa(latencyBucketsPerDoubling) + ` * ln(greatest(date_part('epoch', published_at - created_at) * 1000, 1)) / ln(2))::int AS b
	FROM ` + n.outbox + `
	WHERE published_at >= to_timestamp($1::bigint * 60)
) h
GROUP BY m, destination, b`
}

// dbNowSQL is the database's clock, the one every age is measured with.
const dbNowSQL = `SELECT now()`

// view is one way to walk the events: a state, the index that holds it in
// order, and the keyset that resumes after a row.
type view struct {
	Name  string // the state filter's value
	Label string
	// where is the index's predicate (partial indexes match it exactly).
	where string
	// order is the index order; keyset resumes after a row's key.
	order string
	// keyset, with $K1, $K2 for the cursor's values.
	keyset string
	// keys are the cursor's columns, in order.
	keys []string
	// filter is an extra per-row condition of the state (leased).
	filter string
	// index is the index EXPLAIN must show the walk on.
	index func(tableNames) string
}

// Every view, in the order the filter form offers them.
var views = []view{
	{
		Name: "all", Label: "all",
		order: "id DESC", keyset: "id < $K1", keys: []string{"id"},
		index: func(n tableNames) string { return n.pkIdx },
	},
	{
		Name: "pending", Label: "pending (oldest due first)",
		where: "published_at IS NULL AND dead_at IS NULL",
		order: "available_at, pos", keyset: "(available_at, pos) > ($K1, $K2)", keys: []string{"available_at", "pos"},
		index: func(n tableNames) string { return n.pendingIdx },
	},
	{
		Name: "leased", Label: "leased (in flight)",
		where: "published_at IS NULL AND dead_at IS NULL", filter: "lease_until > now()",
		order: "available_at, pos", keyset: "(available_at, pos) > ($K1, $K2)", keys: []string{"available_at", "pos"},
		index: func(n tableNames) string { return n.pendingIdx },
	},
	{
		Name: "published", Label: "published (newest first)",
		where: "published_at IS NOT NULL",
		order: "published_at DESC, id DESC", keyset: "published_at <= $K1 AND (published_at < $K1 OR id < $K2)", keys: []string{"published_at", "id"},
		index: func(n tableNames) string { return n.publishedIdx },
	},
	{
		Name: "dead", Label: "dead-lettered",
		where: "dead_at IS NOT NULL",
		order: "id DESC", keyset: "id < $K1", keys: []string{"id"},
		index: func(n tableNames) string { return n.deadIdx },
	},
}

func findView(name string) (view, bool) {
	for _, v := range views {
		if v.Name == name {
			return v, true
		}
	}
	return view{}, false
}

// listColumns are what a list row shows: never the payload, and the
// first 300 characters of the last error.
const listColumns = `id, event_type, aggregate_type, aggregate_id, destination, attempts, created_at, available_at,
	published_at, dead_at, lease_until, left(last_error, 300) AS last_error, pos`

// eventFilter is the events page's filter, as SQL conditions over
// parameters.
type eventFilter struct {
	Types         []string
	AggregateType string
	AggregateID   string
	Destination   *string
	Since, Until  string // RFC 3339, parsed by the handler; "" for open
}

// listQuery is one events page's statement and its arguments.
type listQuery struct {
	sql  string
	args []any
}

// buildList walks v's index from cursor (nil for the first page),
// examining at most scan rows, and returns up to page+1 rows that match f,
// plus the scan-th row when the walk reached it (rn = scan), which is
// where a search goes on.
//
// The inner LIMIT is what bounds the work: PostgreSQL never pushes a
// condition below a LIMIT, so the filters are checked on at most scan
// rows whatever their selectivity; the walk is the index order, so no
// statement sorts (the published view's tie-break on id is an incremental
// sort within one published_at).
//
// On the partitioned layout pruneFrom and pruneTo (pruneRange) keep the
// walk to the partitions that may hold rows of the time filter.
func buildList(n tableNames, v view, f eventFilter, cursor []any, scan, page int, since, until any, pruneFrom, pruneTo *time.Time) listQuery {
	var args []any
	arg := func(val any) string {
		args = append(args, val)
		return "$" + strconv.Itoa(len(args))
	}
	var where []string
	if v.where != "" {
		where = append(where, v.where)
	}
	if cursor != nil {
		ks := v.keyset
		for i, c := range cursor {
			ks = strings.ReplaceAll(ks, "$K"+strconv.Itoa(i+1), arg(c)+keyCast(v.keys[i]))
		}
		where = append(where, ks)
	}
	if pruneFrom != nil {
		where = append(where, "created_at >= "+arg(*pruneFrom)+"::timestamptz")
	}
	if pruneTo != nil {
		where = append(where, "created_at < "+arg(*pruneTo)+"::timestamptz")
	}
	var hits []string
	if v.filter != "" {
		hits = append(hits, v.filter)
	}
	if len(f.Types) == 1 {
		hits = append(hits, "event_type = "+arg(f.Types[0]))
	} else if len(f.Types) > 1 {
		hits = append(hits, "event_type = ANY("+arg(f.Types)+"::text[])")
	}
	if f.AggregateType != "" {
		hits = append(hits, "aggregate_type = "+arg(f.AggregateType))
	}
	if f.AggregateID != "" {
		hits = append(hits, "aggregate_id = "+arg(f.AggregateID))
	}
	if f.Destination != nil {
		hits = append(hits, "destination = "+arg(*f.Destination))
	}
	if since != nil {
		p := arg(since)
		hits = append(hits, "created_at >= "+p+"::timestamptz")
		if v.Name == "published" {
			// An event is published after it was created (both stamped
			// by the database's clock), so the walk can stop at since.
			where = append(where, "published_at >= "+p+"::timestamptz")
		}
	}
	if until != nil {
		hits = append(hits, "created_at < "+arg(until)+"::timestamptz")
	}
	hit := "TRUE"
	if len(hits) > 0 {
		hit = "(" + strings.Join(hits, " AND ") + ")"
	}
	w := ""
	if len(where) > 0 {
		w = "\n\t\tWHERE " + strings.Join(where, " AND ")
	}
	scanArg := arg(scan)
	pageArg := arg(page + 1)
	sql := `SELECT id, event_type, aggregate_type, aggregate_id, destination, attempts, created_at, available_at,
	published_at, dead_at, lease_until, last_error, pos, hit, rn = ` + scanArg + `::bigint, now()
FROM (
	SELECT s.*, row_number() OVER () AS rn FROM (
		SELECT ` + listColumns + `, ` + hit + ` AS hit
		FROM ` + n.outbox + w + `
		ORDER BY ` + v.order + `
		LIMIT ` + scanArg + `
	) s
) w
WHERE hit OR rn = ` + scanArg + `::bigint
LIMIT ` + pageArg
	return listQuery{sql: sql, args: args}
}

// keyCast types a cursor parameter.
func keyCast(col string) string {
	switch col {
	case "id":
		return "::uuid"
	case "pos":
		return "::bigint"
	default:
		return "::timestamptz"
	}
}

// deadLettersSQL reads the most recent dead letters through the dead
// index, for grouping: type and error only.
func deadLettersSQL(n tableNames) string {
	return `SELECT id, event_type, destination, COALESCE(last_error, ''), dead_at FROM ` + n.outbox + `
WHERE dead_at IS NOT NULL
ORDER BY id DESC
LIMIT $1`
}
