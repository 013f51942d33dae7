package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	alertsFile     = "prometheus/alerts.yml"
	alertsTestFile = "prometheus/alerts_test.yml"
)

// wantAlerts are the alerts alerts.yml must define.
var wantAlerts = []string{
	"OutboxOldestPendingTooOld",
	"OutboxDeadLettersIncreasing",
	"OutboxRelayDown",
	"OutboxSettleErrors",
	"OutboxRetentionFallingBehind",
	"OutboxPartitionsRunningOut",
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval,omitempty"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

func readRules(t *testing.T, path string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

func (f ruleFile) rules() []rule {
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// promtool returns promtool's path, failing the test with what to do when
// it is missing: these tests are part of make test, never skipped.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not in PATH: install Debian's prometheus package (apt-get install --no-install-recommends prometheus; .ci/services.sh does), or Prometheus's release tarball, which holds promtool")
	}
	return p
}

// TestPromtoolRules runs `promtool check rules` and `promtool test rules`:
// the rules parse, and each alert fires and stays silent where
// alerts_test.yml says.
func TestPromtoolRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(alertsFile)},
		{"test", "rules", filepath.Base(alertsTestFile)},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = filepath.Dir(alertsFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

var (
	// quoted, matchers and grouping are the parts of a PromQL expression
	// that hold label names and values rather than metric names.
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	matchers = regexp.MustCompile(`\{[^}]*\}`)
	grouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// identifier is a metric name, once those parts are gone (functions
	// and keywords match too; only outboxkit_ and outboxctl_ names are
	// kept).
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// ourSeries returns the outboxkit_ and outboxctl_ metric names a PromQL
// expression selects: label names in matchers and in by (...) are not
// metric names.
func ourSeries(expr string) []string {
	expr = quoted.ReplaceAllString(expr, `""`)
	expr = matchers.ReplaceAllString(expr, "{}")
	expr = grouping.ReplaceAllString(expr, "")
	var out []string
	for _, m := range identifier.FindAllString(expr, -1) {
		if (strings.HasPrefix(m, "outboxkit_") || strings.HasPrefix(m, "outboxctl_")) && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

func TestOutboxkitSeries(t *testing.T) {
	t.Parallel()
	got := ourSeries(`sum by (outboxkit_outcome, schema) (rate(outboxkit_events_settled_total{schema=~"$schema", outboxkit_outcome="published"}[5m]))` +
		` / on (outboxkit_x) group_left (outboxkit_y) outboxkit_events_pending{a="outboxkit_not_a_metric"} > outboxkit_events_leased` +
		` or time() - outboxctl_retention_last_pass_timestamp_seconds`)
	want := []string{"outboxkit_events_settled_total", "outboxkit_events_pending", "outboxkit_events_leased", "outboxctl_retention_last_pass_timestamp_seconds"}
	if !slices.Equal(got, want) {
		t.Errorf("ourSeries = %v, want %v", got, want)
	}
}

// TestAlertRules checks what promtool does not: the five alerts exist, each
// uses only metrics the relay serves (Metrics), aggregates by the tenant's
// labels, says what happened and where its runbook is, and has a
// promtool case where it fires and one where it does not.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	rules := readRules(t, alertsFile).rules()
	var names []string
	for _, r := range rules {
		names = append(names, r.Alert)
		if r.Alert == "" {
			t.Errorf("rule %q is not an alert: recording rules belong in a file of their own", r.Expr)
			continue
		}
		used := ourSeries(r.Expr)
		if len(used) == 0 && !strings.Contains(r.Expr, "up{") {
			t.Errorf("%s uses no metric of the relay's: %s", r.Alert, r.Expr)
		}
		for _, s := range used {
			if _, ok := FamilyOf(s); !ok {
				t.Errorf("%s uses %s, which the relay does not serve (Metrics())", r.Alert, s)
			}
		}
		if len(used) > 0 && !strings.Contains(r.Expr, "by (database, schema, table") {
			t.Errorf("%s does not aggregate by (database, schema, table, ...): one alert per tenant's table, whatever the number of relays: %s", r.Alert, r.Expr)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s has no %s annotation", r.Alert, a)
			}
		}
		if !strings.Contains(r.Annotations["runbook_url"], "docs/OPERATIONS.md#") {
			t.Errorf("%s's runbook_url %q does not point at a section of docs/OPERATIONS.md", r.Alert, r.Annotations["runbook_url"])
		}
		if r.Labels["severity"] == "" {
			t.Errorf("%s has no severity label", r.Alert)
		}
	}
	for _, a := range wantAlerts {
		if !slices.Contains(names, a) {
			t.Errorf("alerts.yml lacks %s", a)
		}
	}

	fires, silent := promtoolCases(t)
	for _, a := range names {
		if fires[a] == 0 {
			t.Errorf("%s has no promtool case where it fires (%s)", a, alertsTestFile)
		}
		if silent[a] == 0 {
			t.Errorf("%s has no promtool case where it must not fire (%s)", a, alertsTestFile)
		}
	}
}

// promtoolCases counts, per alert, the alerts_test.yml evaluations that
// expect it to fire and those that expect silence.
func promtoolCases(t *testing.T) (fires, silent map[string]int) {
	t.Helper()
	b, err := os.ReadFile(alertsTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsTestFile, err)
	}
	if !slices.Equal(f.RuleFiles, []string{filepath.Base(alertsFile)}) {
		t.Errorf("%s tests %v, want [%s] alone", alertsTestFile, f.RuleFiles, filepath.Base(alertsFile))
	}
	fires, silent = map[string]int{}, map[string]int{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname]++
			} else {
				silent[a.Alertname]++
			}
		}
	}
	return fires, silent
}
