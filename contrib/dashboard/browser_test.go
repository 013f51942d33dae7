package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The browser tests drive Debian's Chromium (never a downloaded browser)
// through chromedp. They fail, with what to do, when it is missing:
// .ci/services.sh (ensure_chromium) installs it.

// chromiumPath is the browser, OUTBOXKIT_CHROMIUM or Debian's.
func chromiumPath() string {
	if p := os.Getenv("OUTBOXKIT_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// screenshotsEnv refreshes docs/dashboard's screenshots when set to 1;
// otherwise the tests only check that they exist and are small PNGs.
const screenshotsEnv = "OUTBOXKIT_DASHBOARD_SCREENSHOTS"

// maxScreenshotBytes keeps the docs' images small.
const maxScreenshotBytes = 200 << 10

// screenshotDir is where docs/DASHBOARD.md's images live.
var screenshotDir = filepath.Join("..", "..", "docs", "dashboard")

// browser starts a headless Chromium of its own (a fresh profile) for
// one test and returns a tab's context. hostRules maps names to loopback
// (--host-resolver-rules), for pages addressed by a non-loopback name.
func browser(t *testing.T, hostRules string) context.Context {
	t.Helper()
	path := chromiumPath()
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the browser tests need Chromium at %s, which is missing: install Debian's package (apt-get install chromium; .ci/services.sh does it in ensure_chromium), or point OUTBOXKIT_CHROMIUM at a Chromium binary. Never a downloaded browser.", path)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("font-render-hinting", "none"),
		chromedp.WindowSize(1280, 860),
	}
	if hostRules != "" {
		opts = append(opts, chromedp.Flag("host-resolver-rules", hostRules))
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860)); err != nil {
		t.Fatalf("start Chromium (%s): %v", path, err)
	}
	return ctx
}

// fail ends the test with err and where the browser is.
func fail(t *testing.T, ctx context.Context, what string, err error) {
	t.Helper()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	t.Fatalf("%s: %v (page %s: %.800s)", what, err, loc, body)
}

// do runs browser steps.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		fail(t, ctx, what, err)
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		fail(t, ctx, "evaluate "+expr, err)
	}
	return v
}

// waitJS waits until expr is true.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		fail(t, ctx, what, err)
	}
}

// waitURL waits, across navigations, until the page's URL contains sub.
func waitURL(t *testing.T, ctx context.Context, sub string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if loc, err := chromedp.Run(ctx, chromedp.Location()); err == nil && strings.Contains(loc, sub) {
			return
		}
		if time.Now().After(deadline) {
			fail(t, ctx, "wait for a page at …"+sub, context.DeadlineExceeded)
		}
		<-tick.C
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		fail(t, ctx, "read "+sel, err)
	}
	return strings.TrimSpace(s)
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// axe is axe-core's script, from the npm lock file (npm ci once per test
// binary, into a temporary directory).
var axe struct {
	once sync.Once
	src  string
	err  error
}

func axeSource(t *testing.T) string {
	t.Helper()
	axe.once.Do(func() {
		dir, err := os.MkdirTemp("", "dashboard-npm-")
		if err != nil {
			axe.err = err
			return
		}
		defer os.RemoveAll(dir)
		for _, f := range []string{"package.json", "package-lock.json"} {
			b, err := os.ReadFile(filepath.Join("npm", f))
			if err != nil {
				axe.err = err
				return
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				axe.err = err
				return
			}
		}
		cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			axe.err = fmt.Errorf("npm ci in a copy of contrib/dashboard/npm (node and npm: .ci/services.sh ensure_node): %v\n%s", err, out)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "node_modules", "axe-core", "axe.min.js"))
		axe.src, axe.err = string(b), err
	})
	if axe.err != nil {
		t.Fatal(axe.err)
	}
	return axe.src
}

// checkA11y runs axe-core's WCAG 2.1 A and AA rules and best practices on
// the current page and fails on any violation.
func checkA11y(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	src := axeSource(t)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](src)); err != nil {
		fail(t, ctx, "load axe-core on "+page, err)
	}
	s := eval[string](t, ctx, `axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]}}).then(r => JSON.stringify({violations: r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.html)})), passes: r.passes.length}))`)
	var out struct {
		Violations []struct {
			ID, Impact, Help string
			Nodes            []string
		}
		Passes int
	}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("axe on %s: %v", page, err)
	}
	if out.Passes == 0 {
		t.Fatalf("axe on %s passed no rule: it did not run", page)
	}
	for _, v := range out.Violations {
		t.Errorf("accessibility (axe-core) on %s: %s (%s): %s %v", page, v.ID, v.Impact, v.Help, v.Nodes)
	}
}

// screenshot refreshes docs/dashboard/<name>.png under screenshotsEnv;
// otherwise it checks the committed one is a valid, small PNG.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	path := filepath.Join(screenshotDir, name+".png")
	if os.Getenv(screenshotsEnv) == "1" {
		buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			fail(t, ctx, "screenshot "+name, err)
		}
		if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("docs screenshot %s: %v (refresh them with %s=1 go test ./contrib/dashboard/)", path, err, screenshotsEnv)
	}
	if len(b) > maxScreenshotBytes {
		t.Errorf("docs screenshot %s is %d bytes, over %d", path, len(b), maxScreenshotBytes)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil || cfg.Width < 400 || cfg.Height < 300 {
		t.Errorf("docs screenshot %s is not a valid PNG of a page (%v, %dx%d)", path, err, cfg.Width, cfg.Height)
	}
}

// seedHistory writes an hour of published events (four destinations,
// latencies of a few to a few hundred milliseconds), so the charts have
// something to draw.
func seedHistory(t *testing.T, db testDB) {
	t.Helper()
	_, err := db.pool.Exec(ctxT(t), `INSERT INTO `+db.schema+`.outbox_events (event_type, payload, destination, aggregate_type, aggregate_id, created_at, published_at, attempts)
SELECT (ARRAY['order.placed','order.paid','order.shipped'])[1 + i % 3], '{"n": 1}',
	(ARRAY['https://billing.example/hook','https://shipping.example/hook','analytics',''])[1 + i % 4],
	'order', (i % 500)::text,
	now() - (i * interval '1.2 s') - ((5 + (i % 37) * (1 + i % 7)) * interval '1 ms'), now() - (i * interval '1.2 s'), 1
FROM generate_series(1, 2900) i`)
	if err != nil {
		t.Fatal(err)
	}
}

func TestBrowserOverview(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	standardSeed(t, db)
	seedHistory(t, db)
	srv, _ := newServer(t, db, func(c *Config) { c.RefreshInterval = time.Second })
	ctx := browser(t, "")
	do(t, ctx, "load the overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css(`#refresh-status[data-updated]`)))
	canvases := eval[int](t, ctx, `document.querySelectorAll(".chart canvas").length`)
	if canvases != 2 {
		t.Errorf("the overview drew %d charts, want 2", canvases)
	}
	if got := text(t, ctx, `[data-f="pending"]`); got != "2" {
		t.Errorf("pending card shows %q, want 2 (one waiting, one leased)", got)
	}
	if got := text(t, ctx, `[data-f="dead"]`); got != "4" {
		t.Errorf("dead-letter card shows %q, want 4", got)
	}
	// Auto-refresh: a new dead letter shows up without a reload.
	db.seed(t, seedEvent{Type: "order.refunded", State: "dead", Err: "boom"})
	waitJS(t, ctx, "wait for the refresh", `document.querySelector('[data-f="dead"]').textContent === "5"`)
	screenshot(t, ctx, "overview")
	checkA11y(t, ctx, "the overview")
}

// TestBrowserOverviewPartitioned: on hourly partitions the overview
// shows the layout, and its refresh raises the default partition's
// warning once a row lands there.
func TestBrowserOverviewPartitioned(t *testing.T) {
	t.Parallel()
	db := newDBLayout(t, postgres.PartitionHourly)
	standardSeed(t, db)
	srv, _ := newServer(t, db, func(c *Config) { c.RefreshInterval = time.Second })
	ctx := browser(t, "")
	do(t, ctx, "load the overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css(`#refresh-status[data-updated]`)))
	if got := text(t, ctx, `[data-f="layout"]`); !regexp.MustCompile(`^Layout: hourly partitions · [89] partition\(s\) · periods \d{4}-\d\d-\d\d \d\d:00 to `).MatchString(got) || !strings.HasSuffix(got, "default partition: 0 event(s)") {
		t.Errorf("the layout line reads %q", got)
	}
	if eval[bool](t, ctx, `!document.querySelector('[data-f="default-rows"]').hidden`) {
		t.Errorf("the default partition's warning shows with no row there")
	}
	if got := text(t, ctx, `[data-f="pending"]`); got != "2" {
		t.Errorf("pending card shows %q, want 2", got)
	}
	if _, err := db.pool.Exec(ctxT(t), `INSERT INTO `+db.schema+`.outbox_events (event_type, payload, created_at) VALUES ('far.future', '{}', now() + interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "wait for the warning", `!document.querySelector('[data-f="default-rows"]').hidden`)
	if got := text(t, ctx, `[data-f="default-rows"]`); !strings.HasPrefix(got, "Partition maintenance is behind: 1 pending or published event(s)") {
		t.Errorf("the warning reads %q", got)
	}
	checkA11y(t, ctx, "the overview of a partitioned table")
}

func TestBrowserEventsFilterAndOpen(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	standardSeed(t, db)
	ids := db.seed(t, seedEvent{Type: "order.placed", AggType: "order", AggID: "42", Dest: "https://billing.example/hook",
		Payload: `{"order":42,"lines":[{"sku":"A-1","qty":2}],"total":"19.90"}`,
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "Authorization": "Bearer s3cr3t-t0ken-value", "x-tenant": "acme"},
		State:   "dead", Err: "publish: 410 Gone"})
	srv, _ := newServer(t, db, nil)
	ctx := browser(t, "")
	do(t, ctx, "load the events page", chromedp.Navigate(srv.URL+"/events"), chromedp.WaitVisible(css("table.events")))
	if n := eval[int](t, ctx, `document.querySelectorAll("table.events tbody tr").length`); n != 9 {
		t.Errorf("the events page lists %d events, want all 9", n)
	}
	checkA11y(t, ctx, "the events page")
	// Filter through the form, with the keyboard's submit.
	do(t, ctx, "filter dead order.placed events of order/42",
		chromedp.SetValue(css("#f-state"), "dead"),
		chromedp.SendKeys(css("#f-type"), "order.placed"),
		chromedp.SendKeys(css("#f-agg"), "order/42"),
		chromedp.Submit(css("#f-type")))
	waitURL(t, ctx, "state=dead")
	do(t, ctx, "wait for the list", chromedp.WaitVisible(css("table.events")))
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if !strings.Contains(loc, "state=dead") || !strings.Contains(loc, "aggregate=order%2F42") {
		t.Errorf("the filter form went to %s", loc)
	}
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("table.events tbody td.id")].map(td => td.textContent.trim())`)
	if len(rows) != 1 || rows[0] != ids[0].String() {
		t.Fatalf("filtered list shows %v, want only %s", rows, ids[0])
	}
	screenshot(t, ctx, "events")
	do(t, ctx, "open the event", chromedp.Click(css("table.events tbody td.id a")), chromedp.WaitVisible(css("pre.payload")))
	payload := eval[string](t, ctx, `document.querySelector("pre.payload").textContent`)
	if !strings.Contains(payload, "\"lines\": [\n    {\n      \"qty\": 2,\n      \"sku\": \"A-1\"") {
		h, _ := chromedp.Run(ctx, chromedp.OuterHTML(css("main")))
		t.Errorf("payload is not pretty-printed:\n%s\n%s", payload, h)
	}
	body := text(t, ctx, "main")
	if strings.Contains(body, "s3cr3t") {
		t.Errorf("the event page shows the Authorization header's token:\n%s", body)
	}
	for _, want := range []string{"[redacted]", "acme", "publish: 410 Gone", "dead-lettered", "order/42", "Attempts"} {
		if !strings.Contains(body, want) {
			t.Errorf("the event page lacks %q:\n%s", want, body)
		}
	}
	href := eval[string](t, ctx, `document.querySelector('a[href*="jaeger"]').getAttribute("href")`)
	if href != "http://jaeger.example:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace link is %q", href)
	}
	screenshot(t, ctx, "event")
	checkA11y(t, ctx, "the event page")
}

// deadCount counts dead letters in the table.
func deadCount(t *testing.T, db testDB) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(ctxT(t), `SELECT count(*) FROM `+db.schema+`.outbox_events WHERE dead_at IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBrowserDeadLettersReplayAndPurge runs on the plain layout and on
// daily partitions, with the group's dead letters in two of them.
func TestBrowserDeadLettersReplayAndPurge(t *testing.T) {
	t.Parallel()
	for _, layout := range []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionDaily} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			browserDeadLettersReplayAndPurge(t, newDBLayout(t, layout))
		})
	}
}

func browserDeadLettersReplayAndPurge(t *testing.T, db testDB) {
	standardSeed(t, db)
	// The docs' screenshots are the plain layout's.
	screenshot := func(t *testing.T, ctx context.Context, name string) {
		if db.layout == postgres.PartitionNone {
			screenshot(t, ctx, name)
		}
	}
	if db.layout != postgres.PartitionNone {
		var id string
		if err := db.pool.QueryRow(ctxT(t), `SELECT id::text FROM `+db.schema+`.outbox_events WHERE event_type = 'invoice.sent' ORDER BY id LIMIT 1`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		parsed, _ := core.ParseID(id)
		db.moveCreated(t, 25*time.Hour, parsed)
		var parts int
		if err := db.pool.QueryRow(ctxT(t), `SELECT count(DISTINCT tableoid) FROM `+db.schema+`.outbox_events WHERE event_type = 'invoice.sent'`).Scan(&parts); err != nil || parts != 2 {
			t.Fatalf("the group's dead letters are in %d partitions (%v), want 2", parts, err)
		}
	}
	srv, logs := newServer(t, db, nil)
	ctx := browser(t, "")
	do(t, ctx, "load the dead letters", chromedp.Navigate(srv.URL+"/deadletters"), chromedp.WaitVisible(css("table.groups")))
	counts := eval[[]string](t, ctx, `[...document.querySelectorAll("table.groups tbody tr")].map(tr => tr.children[1].textContent.trim() + "=" + tr.children[0].textContent.trim())`)
	if strings.Join(counts, ",") != "invoice.sent=3,invoice.voided=1" {
		t.Fatalf("groups are %v, want invoice.sent=3,invoice.voided=1", counts)
	}
	if body := text(t, ctx, "main"); strings.Contains(body, "hunter2") || !strings.Contains(body, "https://[redacted]@mail.example/hook") {
		t.Errorf("the group's error is not redacted:\n%s", body)
	}
	screenshot(t, ctx, "deadletters")
	checkA11y(t, ctx, "the dead-letter page")
	var before []string
	rows, err := db.pool.Query(ctxT(t), `SELECT id::text FROM `+db.schema+`.outbox_events WHERE event_type = 'invoice.sent' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		before = append(before, s)
	}
	rows.Close()

	// Replay the group of three: the confirmation says how many.
	do(t, ctx, "ask to replay the invoice.sent group",
		chromedp.Click(css(`tr:first-child button[value="replay"]`)), chromedp.WaitVisible(css("#confirm")))
	if q := text(t, ctx, "h1"); q != "Replay 3 dead letter(s)?" {
		t.Errorf("the confirmation asks %q", q)
	}
	screenshot(t, ctx, "confirm")
	checkA11y(t, ctx, "the confirmation")
	if n := deadCount(t, db); n != 4 {
		t.Fatalf("asking for a confirmation changed something: %d dead letters, want 4", n)
	}
	do(t, ctx, "confirm the replay", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("p.done")))
	if got := text(t, ctx, "p.done"); !strings.HasPrefix(got, "Replayed 3 dead-lettered event(s)") {
		t.Errorf("after the replay the page says %q", got)
	}
	counts = eval[[]string](t, ctx, `[...document.querySelectorAll("table.groups tbody tr")].map(tr => tr.children[1].textContent.trim() + "=" + tr.children[0].textContent.trim())`)
	if strings.Join(counts, ",") != "invoice.voided=1" {
		t.Errorf("after the replay the groups are %v, want invoice.voided=1", counts)
	}
	if got := text(t, ctx, `[data-f="dead-total"]`); !strings.HasPrefix(got, "1 dead-lettered") {
		t.Errorf("after the replay the total says %q", got)
	}
	// Replayed with their IDs: the same rows, pending, attempts reset.
	var pendingSame int
	if err := db.pool.QueryRow(ctxT(t), `SELECT count(*) FROM `+db.schema+`.outbox_events WHERE id = ANY($1::uuid[]) AND dead_at IS NULL AND published_at IS NULL AND attempts = 0`, before).Scan(&pendingSame); err != nil {
		t.Fatal(err)
	}
	if pendingSame != 3 {
		t.Errorf("%d of the 3 replayed events are pending under their old IDs", pendingSame)
	}

	// Purge the last group, through its page and a ticked selection.
	do(t, ctx, "open the invoice.voided group", chromedp.Click(css(`table.groups tbody tr:first-child td:nth-child(2) a`)), chromedp.WaitVisible(css(`input[name="id"]`)))
	checkA11y(t, ctx, "a group's page")
	do(t, ctx, "tick its event and ask to purge it",
		chromedp.Click(css(`input[name="id"]`)),
		chromedp.Click(css(`input[name="scope"][value="selection"]`)),
		chromedp.Click(css(`button[value="purge"]`)), chromedp.WaitVisible(css("#confirm")))
	if q := text(t, ctx, "h1"); q != "Purge 1 dead letter(s)?" {
		t.Errorf("the confirmation asks %q", q)
	}
	if n := deadCount(t, db); n != 1 {
		t.Fatalf("asking to purge changed something: %d dead letters, want 1", n)
	}
	do(t, ctx, "confirm the purge", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("p.done")))
	if got := text(t, ctx, "p.done"); got != "Purged 1 dead-lettered event(s)." {
		t.Errorf("after the purge the page says %q", got)
	}
	if n := deadCount(t, db); n != 0 {
		t.Errorf("%d dead letters left after purging the last one", n)
	}
	// One audit line per action, with who and how many.
	var audit []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "dashboard action" {
			audit = append(audit, m)
		}
	}
	if len(audit) != 2 {
		t.Fatalf("%d audit lines, want 2:\n%s", len(audit), logs.String())
	}
	if audit[0]["action"] != "replay" || audit[0]["rows"] != 3.0 || audit[0]["scope"] != "group" || audit[0]["who"] != "local user" {
		t.Errorf("replay's audit line: %v", audit[0])
	}
	if audit[1]["action"] != "purge" || audit[1]["rows"] != 1.0 || audit[1]["scope"] != "selection" {
		t.Errorf("purge's audit line: %v", audit[1])
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the log holds a password:\n%s", logs.String())
	}
}
