package dashboard

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/postgres"
)

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType  string     `json:"Node Type"`
	IndexName string     `json:"Index Name"`
	Relation  string     `json:"Relation Name"`
	Plans     []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

func explain(t *testing.T, db testDB, sql string, args ...any) planNode {
	t.Helper()
	var out []byte
	if err := db.pool.QueryRow(ctxT(t), "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("explain output: %v %s", err, out)
	}
	return plans[0].Plan
}

// seedLarge writes enough rows in every state that the planner's choices
// are those of a real table: 60,000 published over two days, 3,000
// pending (some leased), 600 dead, then ANALYZE.
func seedLarge(t *testing.T, db testDB) {
	t.Helper()
	tbl := db.schema + ".outbox_events"
	for _, q := range []string{
		`INSERT INTO ` + tbl + ` (event_type, payload, destination, aggregate_type, aggregate_id, created_at, published_at, attempts)
SELECT 'type.' || (i % 20), '{}', 'dest' || (i % 4), 'order', (i % 5000)::text, now() - i * interval '3 s' - interval '20 ms', now() - i * interval '3 s', 1
FROM generate_series(1, 60000) i`,
		`INSERT INTO ` + tbl + ` (event_type, payload, destination, aggregate_type, aggregate_id, created_at, available_at)
SELECT 'type.' || (i % 20), '{}', 'dest' || (i % 4), 'order', (i % 5000)::text, now() - i * interval '1 s', now() - i * interval '1 s'
FROM generate_series(1, 3000) i`,
		`UPDATE ` + tbl + ` SET lease_token = gen_random_uuid(), lease_until = now() + interval '1 minute' WHERE published_at IS NULL AND aggregate_id::int % 50 = 0`,
		`INSERT INTO ` + tbl + ` (event_type, payload, destination, created_at, dead_at, last_error, attempts)
SELECT 'type.' || (i % 20), '{}', 'dest' || (i % 4), now() - i * interval '10 s', now() - i * interval '10 s', 'publish: ' || (i % 3) || ' failed', 10
FROM generate_series(1, 600) i`,
		`ANALYZE ` + tbl,
	} {
		if _, err := db.pool.Exec(ctxT(t), q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
}

// TestEventQueriesUseTheirIndex: every events page — every state, every
// filter, first page and a later one — walks its state's index in order:
// no sequential scan, no sort (the published view's tie-break on ID is an
// incremental sort within one published_at).
//
// On the partitioned layout the walk is a Merge Append of the same index
// in every partition (a partition's copy of a partitioned index, or its
// own primary key), a sequential scan allowed only of an empty partition
// (a period created ahead), and a filter on the creation time prunes the
// partitions outside it.
func TestEventQueriesUseTheirIndex(t *testing.T) {
	t.Parallel()
	for _, layout := range []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionDaily} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			db := newDBLayout(t, layout)
			seedLarge(t, db)
			eventQueriesUseTheirIndex(t, db)
		})
	}
}

func eventQueriesUseTheirIndex(t *testing.T, db testDB) {
	parents := indexParents(t, db)
	parentOf := func(idx string) string {
		if p, ok := parents[idx]; ok {
			return p
		}
		return idx
	}
	empty := emptyRelations(t, db)
	partitioned, parts, err := readPartitions(ctxT(t), db.pool, newTableNames(db.schema, "outbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	if partitioned != (db.layout != postgres.PartitionNone) {
		t.Fatalf("the table is partitioned: %v, on the %s layout", partitioned, db.layout)
	}
	byName := map[string]partition{}
	withRows := 0
	for _, p := range parts {
		byName[p.Name] = p
		if !empty[p.Name] && !p.Default {
			withRows++
		}
	}
	if partitioned && withRows < 3 {
		t.Fatalf("the seed fills %d partitions, want at least 3", withRows)
	}
	t.Helper()
	n := newTableNames(db.schema, "outbox_events")
	dest := "dest1"
	since := time.Now().Add(-time.Hour)
	until := time.Now()
	filters := map[string]eventFilter{
		"none":        {},
		"type":        {Types: []string{"type.3"}},
		"types":       {Types: []string{"type.3", "type.4"}},
		"aggregate":   {AggregateType: "order", AggregateID: "42"},
		"destination": {Destination: &dest},
		"time":        {Since: "x"},
		"everything":  {Types: []string{"type.3"}, AggregateType: "order", AggregateID: "42", Destination: &dest, Since: "x", Until: "x"},
	}
	// Later pages resume a tenth of the way into each view, as a user
	// paging on would.
	cursors := map[string][]any{}
	for _, v := range views {
		where := ""
		if v.where != "" {
			where = " WHERE " + v.where
		}
		var k2 any
		var q string
		switch len(v.keys) {
		case 1:
			q = `SELECT ` + v.keys[0] + `::text, NULL FROM ` + n.outbox + where + ` ORDER BY ` + v.order + ` OFFSET 60 LIMIT 1`
		default:
			q = `SELECT ` + v.keys[0] + `, ` + v.keys[1] + ` FROM ` + n.outbox + where + ` ORDER BY ` + v.order + ` OFFSET 300 LIMIT 1`
		}
		if v.Name == "published" {
			var at time.Time
			var id string
			if err := db.pool.QueryRow(ctxT(t), `SELECT published_at, id::text FROM `+n.outbox+where+` ORDER BY `+v.order+` OFFSET 6000 LIMIT 1`).Scan(&at, &id); err != nil {
				t.Fatal(err)
			}
			cursors[v.Name] = []any{at, id}
			// With a since filter of an hour ago, a later page resumes
			// within that hour (300 rows, 15 minutes, in).
			if err := db.pool.QueryRow(ctxT(t), `SELECT published_at, id::text FROM `+n.outbox+where+` ORDER BY `+v.order+` OFFSET 300 LIMIT 1`).Scan(&at, &id); err != nil {
				t.Fatal(err)
			}
			cursors["published/since"] = []any{at, id}
			continue
		}
		if len(v.keys) == 1 {
			var id string
			if err := db.pool.QueryRow(ctxT(t), q).Scan(&id, &k2); err != nil {
				t.Fatal(err)
			}
			cursors[v.Name] = []any{id}
			continue
		}
		var at time.Time
		var pos int64
		if err := db.pool.QueryRow(ctxT(t), q).Scan(&at, &pos); err != nil {
			t.Fatal(err)
		}
		cursors[v.Name] = []any{at, pos}
	}
	checked := 0
	for _, v := range views {
		for fname, f := range filters {
			later := cursors[v.Name]
			if c, ok := cursors[v.Name+"/since"]; ok && f.Since != "" {
				later = c
			}
			for _, cur := range [][]any{nil, later} {
				var s, u any
				if f.Since != "" {
					s = since
				}
				if f.Until != "" {
					u = until
				}
				var pf, pt *time.Time
				if partitioned {
					pf, pt = pruneRange(parts, timePtr(s), timePtr(u))
				}
				lq := buildList(n, v, f, cur, 10_000, 50, s, u, pf, pt)
				plan := explain(t, db, lq.sql, lq.args...)
				what := fmt.Sprintf("view %s, filter %s, cursor %v", v.Name, fname, cur != nil)
				onIndex := false
				scanned := map[string]bool{}
				plan.walk(func(p planNode) {
					if p.Relation != "" {
						scanned[p.Relation] = true
					}
					switch {
					case (p.NodeType == "Seq Scan" || strings.HasPrefix(p.NodeType, "Index")) && empty[p.Relation]:
						// An empty partition (a period created ahead):
						// any walk of it costs nothing.
					case p.NodeType == "Seq Scan", strings.HasPrefix(p.NodeType, "Bitmap"):
						t.Errorf("%s: %s on %s: the page must walk %s", what, p.NodeType, p.Relation, v.index(n))
					case p.NodeType == "Sort":
						t.Errorf("%s: a Sort node: the page must come in index order", what)
					case p.NodeType == "Incremental Sort" && v.Name != "published":
						t.Errorf("%s: an Incremental Sort outside the published view", what)
					case strings.HasPrefix(p.NodeType, "Index") && parentOf(p.IndexName) == v.index(n):
						onIndex = true
					case strings.HasPrefix(p.NodeType, "Index"):
						t.Errorf("%s: walks %s (%s), want %s", what, p.IndexName, parentOf(p.IndexName), v.index(n))
					}
				})
				if !onIndex {
					t.Errorf("%s: no scan of %s in the plan", what, v.index(n))
				}
				if partitioned && (s != nil || u != nil) {
					// The filter's range prunes the partitions wholly
					// outside it.
					for rel := range scanned {
						p, ok := byName[rel]
						if !ok || p.Default {
							continue
						}
						if s != nil && !p.To.IsZero() && !p.To.After(since) {
							t.Errorf("%s: reads partition %s, which ends before the filter's start", what, rel)
						}
						if u != nil && !p.From.Before(until) {
							t.Errorf("%s: reads partition %s, which starts after the filter's end", what, rel)
						}
					}
				}
				checked++
			}
		}
	}
	if checked != len(views)*len(filters)*2 {
		t.Fatalf("checked %d plans", checked)
	}
}

// TestOverviewQueriesUseIndexes: the overview reads the pending set, the
// dead letters and the last hour through their partial indexes, never by
// scanning the table. On the partitioned layout only the current period's
// partition may be scanned (early in the period it holds few rows).
func TestOverviewQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	for _, layout := range []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionDaily} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			db := newDBLayout(t, layout)
			seedLarge(t, db)
			overviewQueriesUseIndexes(t, db)
		})
	}
}

func overviewQueriesUseIndexes(t *testing.T, db testDB) {
	t.Helper()
	n := newTableNames(db.schema, "outbox_events")
	parents := indexParents(t, db)
	empty := emptyRelations(t, db)
	// Early in a period the current period's partition holds only the
	// seed's last minutes, and a sequential scan of it is PostgreSQL's
	// right plan; every older partition holds hours of the seed and must
	// still be read by index.
	current := currentPartition(t, db)
	for _, tc := range []struct {
		name, sql, index string
		args             []any
	}{
		// The slot index has the pending index's predicate: either serves.
		{"pending by destination", pendingByDestinationSQL(n), n.pendingIdx + "|" + db.schemaFreeSlotIdx(), nil},
		{"dead by destination", deadByDestinationSQL(n), n.deadIdx, nil},
		{"last hour", publishedHistorySQL(n), n.publishedIdx, []any{time.Now().Unix()/60 - 59}},
		{"dead letters to group", deadLettersSQL(n), n.deadIdx, []any{20000}},
	} {
		plan := explain(t, db, tc.sql, tc.args...)
		onIndex := false
		plan.walk(func(p planNode) {
			if p.NodeType == "Seq Scan" && !empty[p.Relation] && p.Relation != current {
				t.Errorf("%s: a sequential scan of %s", tc.name, p.Relation)
			}
			idx := p.IndexName
			if parent, ok := parents[idx]; ok {
				idx = parent
			}
			if idx != "" && strings.Contains("|"+tc.index+"|", "|"+idx+"|") {
				onIndex = true
			}
		})
		if !onIndex {
			t.Errorf("%s: does not use %s", tc.name, tc.index)
		}
	}
}

func (testDB) schemaFreeSlotIdx() string { return "outbox_events_slot_idx" }

// currentPartition is the name of db's outbox partition that covers the
// database's now(), "" on the plain layout.
func currentPartition(t *testing.T, db testDB) string {
	t.Helper()
	partitioned, parts, err := readPartitions(ctxT(t), db.pool, newTableNames(db.schema, "outbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	if !partitioned {
		return ""
	}
	var now time.Time
	if err := db.pool.QueryRow(ctxT(t), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if !p.Default && !now.Before(p.From) && now.Before(p.To) {
			return p.Name
		}
	}
	t.Fatalf("no partition covers %s: %+v", now, parts)
	return ""
}

// indexParents maps the indexes of db's outbox partitions to the index
// of the table they stand for: a partition's copy of a partitioned index
// to that index, its own primary key to the plain layout's.
func indexParents(t *testing.T, db testDB) map[string]string {
	t.Helper()
	rows, err := db.pool.Query(ctxT(t), `SELECT ic.relname::text, COALESCE(pc.relname::text, CASE WHEN x.indisprimary THEN 'outbox_events_pkey' END, ic.relname::text)
FROM pg_index x
JOIN pg_class ic ON ic.oid = x.indexrelid
JOIN pg_namespace ns ON ns.oid = ic.relnamespace
LEFT JOIN pg_inherits i ON i.inhrelid = ic.oid
LEFT JOIN pg_class pc ON pc.oid = i.inhparent
WHERE ns.nspname = $1`, db.schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var idx, parent string
		if err := rows.Scan(&idx, &parent); err != nil {
			t.Fatal(err)
		}
		out[idx] = parent
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// emptyRelations are db's outbox partitions without a row.
func emptyRelations(t *testing.T, db testDB) map[string]bool {
	t.Helper()
	_, parts, err := readPartitions(ctxT(t), db.pool, newTableNames(db.schema, "outbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range parts {
		var any bool
		if err := db.pool.QueryRow(ctxT(t), `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{db.schema, p.Name}.Sanitize()+`)`).Scan(&any); err != nil {
			t.Fatal(err)
		}
		out[p.Name] = !any
	}
	return out
}
