package monitoring

import (
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const operationsDoc = "../../docs/OPERATIONS.md"

// headingAnchors returns the GitHub anchors of a Markdown page's headings
// (outside code blocks).
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	strip := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := strings.ReplaceAll(strip.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if n := seen[a]; n > 0 { // GitHub numbers repeated headings: replay, replay-1
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunbooksExist: every alert's runbook_url and the dashboard's link
// point at a section of docs/OPERATIONS.md that exists, and every alert
// has a runbook of its own there.
func TestRunbooksExist(t *testing.T) {
	t.Parallel()
	anchors := headingAnchors(readDoc(t))
	check := func(where, link string) {
		u, err := url.Parse(link)
		if err != nil || !strings.HasSuffix(u.Path, "docs/OPERATIONS.md") || u.Fragment == "" {
			t.Errorf("%s links %q, not a section of docs/OPERATIONS.md", where, link)
			return
		}
		if !anchors[u.Fragment] {
			t.Errorf("%s links #%s, which docs/OPERATIONS.md has no heading for", where, u.Fragment)
		}
	}
	for _, r := range readRules(t, alertsFile).rules() {
		check(r.Alert, r.Annotations["runbook_url"])
		if !strings.HasSuffix(r.Annotations["runbook_url"], "#"+strings.ToLower(r.Alert)) {
			t.Errorf("%s's runbook_url %s is not its own section (#%s)", r.Alert, r.Annotations["runbook_url"], strings.ToLower(r.Alert))
		}
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`https://[^"]*OPERATIONS\.md#[^"]*`).FindAllString(string(b), -1) {
		check(dashboardFile, m)
	}
}

// TestOperationsDocMatches: the page shows the systemd unit as it is in
// contrib/monitoring, and lists every metric the rules and the dashboard
// may use.
func TestOperationsDocMatches(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	unit, err := os.ReadFile(systemdUnit)
	if err != nil {
		t.Fatal(err)
	}
	body := string(unit)[strings.Index(string(unit), "[Unit]"):]
	if !strings.Contains(doc, "```ini\n"+body+"```\n") {
		t.Errorf("docs/OPERATIONS.md's ```ini block is not %s from [Unit] on: copy the file into the page", systemdUnit)
	}
	for _, m := range Metrics() {
		if !strings.Contains(doc, "| `"+m.Name+"` |") {
			t.Errorf("docs/OPERATIONS.md's metrics table has no row for %s", m.Name)
		}
	}
}
