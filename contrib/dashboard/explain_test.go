package dashboard

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
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
func TestEventQueriesUseTheirIndex(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	seedLarge(t, db)
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
			for _, cur := range [][]any{nil, cursors[v.Name]} {
				var s, u any
				if f.Since != "" {
					s = since
				}
				if f.Until != "" {
					u = until
				}
				lq := buildList(n, v, f, cur, 10_000, 50, s, u)
				plan := explain(t, db, lq.sql, lq.args...)
				what := fmt.Sprintf("view %s, filter %s, cursor %v", v.Name, fname, cur != nil)
				onIndex := false
				plan.walk(func(p planNode) {
					switch {
					case p.NodeType == "Seq Scan", strings.HasPrefix(p.NodeType, "Bitmap"):
						t.Errorf("%s: %s on %s: the page must walk %s", what, p.NodeType, p.Relation, v.index(n))
					case p.NodeType == "Sort":
						t.Errorf("%s: a Sort node: the page must come in index order", what)
					case p.NodeType == "Incremental Sort" && v.Name != "published":
						t.Errorf("%s: an Incremental Sort outside the published view", what)
					case strings.HasPrefix(p.NodeType, "Index") && p.IndexName == v.index(n):
						onIndex = true
					case strings.HasPrefix(p.NodeType, "Index"):
						t.Errorf("%s: walks %s, want %s", what, p.IndexName, v.index(n))
					}
				})
				if !onIndex {
					t.Errorf("%s: no scan of %s in the plan", what, v.index(n))
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
// scanning the table.
func TestOverviewQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	seedLarge(t, db)
	n := newTableNames(db.schema, "outbox_events")
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
			if p.NodeType == "Seq Scan" {
				t.Errorf("%s: a sequential scan of %s", tc.name, p.Relation)
			}
			if p.IndexName != "" && strings.Contains("|"+tc.index+"|", "|"+p.IndexName+"|") {
				onIndex = true
			}
		})
		if !onIndex {
			t.Errorf("%s: does not use %s", tc.name, tc.index)
		}
	}
}

func (testDB) schemaFreeSlotIdx() string { return "outbox_events_slot_idx" }
