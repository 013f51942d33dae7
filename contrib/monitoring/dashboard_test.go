package monitoring

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "grafana/outboxkit.json"

// selector matches an outboxkit series and its label matchers, if any.
var selector = regexp.MustCompile(`(outbox(?:kit|ctl)_[a-z_]+)(\{[^}]*\})?`)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		RefID        string `json:"refId"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatalf("%s is not well-formed JSON", dashboardFile)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dec.More() {
		t.Fatalf("%s holds more than one JSON value", dashboardFile)
	}
	return d
}

// allPanels flattens rows (collapsed rows hold their panels).
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboard checks the dashboard is well-formed JSON that Grafana can
// import as is, has the panels operators look for, and queries only
// metrics the relay serves (Metrics), filtered by the tenant variables.
func TestDashboard(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("title %q, uid %q, schemaVersion %d: Grafana needs all three", d.Title, d.UID, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if q, ok := v.Query.(map[string]any); ok {
			for _, s := range ourSeries(q["query"].(string)) {
				if _, ok := FamilyOf(s); !ok {
					t.Errorf("variable %s queries %s, which the relay does not serve", v.Name, s)
				}
			}
		}
	}
	for _, want := range []string{"datasource", "database", "schema", "table", "job"} {
		if !slices.Contains(vars, want) {
			t.Errorf("no $%s variable (have %v)", want, vars)
		}
	}

	ids := map[int]bool{}
	var titles []string
	used := map[string]bool{}
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		titles = append(titles, p.Title)
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit Grafana's 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query the $datasource variable: an imported dashboard would point at a data source that does not exist", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			series := ourSeries(tg.Expr)
			for _, s := range series {
				used[s] = true
				if _, ok := FamilyOf(s); !ok {
					t.Errorf("panel %q queries %s, which the relay does not serve (Metrics()): %s", p.Title, s, tg.Expr)
				}
			}
			for _, sel := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				if m, ok := FamilyOf(sel[1]); !ok || m.NoTenant {
					continue // a label name (by (outboxkit_outcome)), reported above, or not a tenant's
				}
				for _, v := range []string{`database=~"$database"`, `schema=~"$schema"`, `table=~"$table"`} {
					if !strings.Contains(sel[2], v) {
						t.Errorf("panel %q: %s%s lacks %s, so the tenant variables do not filter it", p.Title, sel[1], sel[2], v)
					}
				}
			}
			if strings.Contains(tg.Expr, "rate(") && !strings.Contains(tg.Expr, "[$__rate_interval]") {
				t.Errorf("panel %q: use [$__rate_interval] for rates, which follows the scrape interval: %s", p.Title, tg.Expr)
			}
		}
	}
	for _, want := range []string{
		"Pending", "Oldest pending age", "Oldest pending age by table", "Pending and leased by table",
		"Settled by outcome", "Publish duration", "Dead letters", "Dead letters by table", "Tenants",
	} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q (have %q)", want, titles)
		}
	}
	// The panels operators need most, by what they query.
	for _, want := range []string{
		"outboxkit_events_pending",
		"outboxkit_events_oldest_pending_age_seconds",
		"outboxkit_events_settled_total",
		"outboxkit_publish_duration_seconds_bucket",
		"outboxkit_events_dead_lettered",
	} {
		if !used[want] {
			t.Errorf("no panel queries %s", want)
		}
	}
}

// TestDashboardPerTenant: the per-table panels split by the tenant's labels,
// and their legends name the tenant.
func TestDashboardPerTenant(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	n := 0
	for _, p := range d.allPanels() {
		if !strings.HasSuffix(p.Title, "by table") && p.Title != "Tenants" {
			continue
		}
		n++
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, "by (database, schema, table") {
				t.Errorf("panel %q does not split by (database, schema, table): %s", p.Title, tg.Expr)
			}
			if p.Type == "timeseries" && !strings.Contains(tg.LegendFormat, "{{schema}}") {
				t.Errorf("panel %q: legend %q does not name the tenant ({{schema}})", p.Title, tg.LegendFormat)
			}
		}
	}
	if n < 4 {
		t.Errorf("%d per-tenant panels, want at least 4", n)
	}
}
