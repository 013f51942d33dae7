package dashboard

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// moveCreated sets the creation time of ids to ago before now: on the
// partitioned layout the rows move to that period's partition.
func (db testDB) moveCreated(t *testing.T, ago time.Duration, ids ...core.ID) {
	t.Helper()
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	tbl := pgx.Identifier{db.schema, postgres.DefaultTable}.Sanitize()
	if _, err := db.pool.Exec(ctxT(t), `UPDATE `+tbl+` SET created_at = now() - $2::interval WHERE id = ANY($1::uuid[])`, s, ago.String()); err != nil {
		t.Fatal(err)
	}
}

// partitionsOf are the partitions (the table, on the plain layout)
// holding ids.
func (db testDB) partitionsOf(t *testing.T, ids ...core.ID) map[string]bool {
	t.Helper()
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	rows, err := db.pool.Query(ctxT(t), `SELECT DISTINCT tableoid::regclass::text FROM `+db.schema+`.outbox_events WHERE id = ANY($1::uuid[])`, s)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var p string
		_ = rows.Scan(&p)
		out[p] = true
	}
	return out
}

var (
	idCellRE = regexp.MustCompile(`<td class="id"><a href="[^"]*">([0-9a-f-]{36})</a></td>`)
	nextRE   = regexp.MustCompile(`<a href="[^"?]*/events\?([^"]+)" rel="next">`)
)

// listAll pages through an events list from query q (PageSize 2),
// returning every ID listed and the number of pages.
func listAll(t *testing.T, c *http.Client, base, q string) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	for q != "" {
		pages++
		if pages > 50 {
			t.Fatalf("more than 50 pages from %s", q)
		}
		resp, body := get(t, c, base+"/events?"+q)
		if resp.StatusCode != http.StatusOK || strings.Contains(body, `class="error"`) {
			t.Fatalf("GET /events?%s: %s\n%s", q, resp.Status, body)
		}
		for _, m := range idCellRE.FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		q = ""
		if m := nextRE.FindStringSubmatch(body); m != nil {
			q = html.UnescapeString(m[1])
		}
	}
	return ids, pages
}

func strs(ids ...core.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// post sends a dashboard form as the page that holds csrf would, with
// the client's CSRF cookie.
func post(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, b.String()
}

var idsFieldRE = regexp.MustCompile(`<input type="hidden" name="id" value="([^"]+)">`)

// TestEveryLayout runs the overview, the events list with every state,
// filter and page, the event page, the dead-letter groups and their
// replay and purge on each layout, with the seed's rows spread over
// three periods (partitions, on the partitioned layouts) and an inbox
// table beside the outbox.
func TestEveryLayout(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			everyLayout(t, newDBLayout(t, layout))
		})
	}
}

func everyLayout(t *testing.T, db testDB) {
	ctx := ctxT(t)
	p := layoutPeriod(t, db.layout)
	ids := db.seed(t,
		seedEvent{Type: "order.placed", AggType: "order", AggID: "1", Dest: "https://billing.example/hook", State: "published", PublishedAgo: 5 * time.Minute, Latency: 40 * time.Millisecond},
		seedEvent{Type: "order.placed", AggType: "order", AggID: "2", Dest: "https://billing.example/hook", State: "published", PublishedAgo: 3 * time.Minute, Latency: 80 * time.Millisecond},
		seedEvent{Type: "order.placed", AggType: "order", AggID: "3", State: "pending"},
		seedEvent{Type: "order.placed", AggType: "order", AggID: "4", State: "pending"},
		seedEvent{Type: "order.shipped", AggType: "order", AggID: "1", State: "leased"},
		seedEvent{Type: "invoice.sent", AggType: "invoice", AggID: "7", Dest: "https://mail.example/hook", State: "dead", Err: "publish: 503 Service Unavailable (request 8123)"},
		seedEvent{Type: "invoice.sent", AggType: "invoice", AggID: "8", Dest: "https://mail.example/hook", State: "dead", Err: "publish: 503 Service Unavailable (request 9411)"},
		seedEvent{Type: "invoice.sent", AggType: "invoice", AggID: "9", Dest: "https://mail.example/hook", State: "dead", Err: "publish: 503 Service Unavailable (request 77)"},
		seedEvent{Type: "invoice.voided", AggType: "invoice", AggID: "9", State: "dead", Err: "permanent: payload does not decode"},
	)
	published, pending, leased, sent, voided := ids[0:2], ids[2:4], ids[4:5], ids[5:8], ids[8:9]
	// Spread them: one pending event and one of the group two periods
	// back, one of each more one period back; the rest now.
	db.moveCreated(t, 2*p+time.Minute, ids[2], ids[5])
	db.moveCreated(t, p+time.Minute, ids[6], ids[8])
	if got := len(db.partitionsOf(t, ids...)); db.layout != postgres.PartitionNone && got < 3 {
		t.Fatalf("the seed sits in %d partitions, want 3", got)
	}
	inbox := "billing_inbox"
	if err := postgres.Migrate(ctx, db.pool, &postgres.MigrateConfig{Schema: db.schema, Table: inbox}); err != nil {
		t.Fatal(err)
	}
	inboxTbl := pgx.Identifier{db.schema, inbox}.Sanitize()
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+inboxTbl+` (event_type, payload, dead_at, last_error) VALUES ('invoice.sent', '{}', now(), 'publish: 503 Service Unavailable (request 1)'), ('in.pending', '{}', NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	srv, _ := newServer(t, db, func(c *Config) {
		c.PageSize, c.ScanLimit = 2, 4
		c.Targets = append(c.Targets, Target{Pool: db.pool, Schema: db.schema, Table: inbox, Name: "test", Inbox: true})
	})
	c := srv.Client()
	c.Jar = newJar(t)

	// The overview: counts and layout.
	var ov overview
	resp, body := get(t, c, srv.URL+"/api/overview")
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &ov) != nil || len(ov.Targets) != 2 {
		t.Fatalf("GET /api/overview: %s %s", resp.Status, body)
	}
	o := ov.Targets[0]
	if o.Error != "" || o.Pending != 3 || o.Leased != 1 || o.Dead != 4 || o.PublishedHour != 2 {
		t.Errorf("overview: pending %d leased %d dead %d published %d (%s), want 3 1 4 2", o.Pending, o.Leased, o.Dead, o.PublishedHour, o.Error)
	}
	if o.OldestAgeSeconds < (2 * p).Seconds() {
		t.Errorf("oldest pending age %.0f s, want at least %.0f (two periods back)", o.OldestAgeSeconds, (2 * p).Seconds())
	}
	wantKind := map[postgres.Partitioning]string{postgres.PartitionNone: "plain", postgres.PartitionDaily: "daily", postgres.PartitionHourly: "hourly", postgres.PartitionMinutes(15): "15-minute"}[db.layout]
	if o.Layout == nil || o.Layout.Kind != wantKind {
		t.Fatalf("overview layout %+v, want %s", o.Layout, wantKind)
	}
	if db.layout != postgres.PartitionNone {
		// pastPeriods back, the current one, DefaultPartitionsAhead and
		// the default (one fewer if a period ended while the test set
		// them up): as the catalog lists them.
		_, parts, err := readPartitions(ctx, db.pool, newTableNames(db.schema, postgres.DefaultTable))
		if err != nil {
			t.Fatal(err)
		}
		want := len(parts)
		if want < pastPeriods+postgres.DefaultPartitionsAhead(db.layout)+1 {
			t.Errorf("%d partitions, want %d", want, pastPeriods+postgres.DefaultPartitionsAhead(db.layout)+2)
		}
		if o.Layout.Partitions != want || o.Layout.Default == "" || o.Layout.DefaultRows != 0 || o.Layout.Oldest == nil || o.Layout.Newest == nil ||
			!o.Layout.Newest.After(time.Now()) || !o.Layout.Oldest.Before(time.Now().Add(-pastPeriods*p+p)) {
			t.Errorf("overview layout %+v: want %d partitions from %d periods back to %d ahead, none in the default", o.Layout, want, pastPeriods, postgres.DefaultPartitionsAhead(db.layout))
		}
	}
	if in := ov.Targets[1]; in.Error != "" || in.Pending != 1 || in.Dead != 1 || in.Layout == nil || in.Layout.Kind != "plain" {
		t.Errorf("the inbox's overview: pending %d dead %d layout %+v (%s), want 1 1 plain", in.Pending, in.Dead, in.Layout, in.Error)
	}
	_, page := get(t, c, srv.URL+"/")
	if !strings.Contains(page, `data-f="layout">Layout: `+map[string]string{"plain": "plain (one table)", "daily": "daily partitions", "hourly": "hourly partitions", "15-minute": "15-minute partitions"}[wantKind]) {
		t.Errorf("the overview page does not show the layout %s:\n%s", wantKind, page)
	}
	if strings.Contains(page, "Partition maintenance is behind") || !strings.Contains(page, `data-f="default-rows" hidden>`) {
		t.Errorf("the overview warns of rows in the default partition, which has none")
	}

	// The events list: every state, paged two at a time (ScanLimit 4, so
	// the filtered walks also search on across pages).
	all := append(append(append(append(slices.Clone(published), pending...), leased...), sent...), voided...)
	for _, tc := range []struct {
		q    string
		want []core.ID
	}{
		{"state=all", all},
		{"state=pending", append(slices.Clone(pending), leased...)},
		{"state=leased", leased},
		{"state=published", published},
		{"state=dead", append(slices.Clone(sent), voided...)},
		{"state=dead&type=invoice.sent", sent},
		{"state=all&type=invoice.sent,invoice.voided", append(slices.Clone(sent), voided...)},
		{"state=all&aggregate=invoice/9", []core.ID{ids[7], ids[8]}},
		{"state=all&aggregate=order/", append(append(slices.Clone(published), pending...), leased...)},
		{"state=all&destination=https://mail.example/hook", sent},
		{"state=pending&destination=" + url.QueryEscape(defaultDestination), append(slices.Clone(pending), leased...)},
		// Created within the last period and a half: not the rows moved
		// two periods back; until an hour ago: only those moved back.
		{"state=all&since=" + time.Now().Add(-p*3/2).UTC().Format(time.RFC3339), []core.ID{ids[0], ids[1], ids[3], ids[4], ids[6], ids[7], ids[8]}},
		{"state=dead&since=" + time.Now().Add(-p*3/2).UTC().Format(time.RFC3339), []core.ID{ids[6], ids[7], ids[8]}},
		{"state=pending&since=" + time.Now().Add(-p*3/2).UTC().Format(time.RFC3339), []core.ID{ids[3], ids[4]}},
		{"state=all&until=" + time.Now().Add(-p/2).UTC().Format(time.RFC3339), []core.ID{ids[2], ids[5], ids[6], ids[8]}},
		{"state=all&since=" + time.Now().Add(-p*5/2).UTC().Format(time.RFC3339) + "&until=" + time.Now().Add(-p*3/2).UTC().Format(time.RFC3339), []core.ID{ids[2], ids[5]}},
		{"state=published&since=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), published},
	} {
		got, pages := listAll(t, c, srv.URL, "t=0&"+tc.q)
		if !slices.Equal(sorted(got), strs(tc.want...)) {
			t.Errorf("%s lists %v, want %v", tc.q, sorted(got), strs(tc.want...))
		}
		if len(tc.want) > 2 && pages < 2 {
			t.Errorf("%s: %d events on %d page(s) of 2", tc.q, len(got), pages)
		}
	}

	// The event page, by ID, for a row two periods back.
	resp, body = get(t, c, srv.URL+"/event?t=0&id="+ids[5].String())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, ids[5].String()) || !strings.Contains(body, "dead-lettered") || strings.Contains(body, `data-f="copies"`) {
		t.Errorf("the event page of %s: %s\n%s", ids[5], resp.Status, body)
	}
	if resp, _ := get(t, c, srv.URL+"/event?t=0&id="+core.NewID().String()); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the event page of an unknown ID: %s", resp.Status)
	}

	// Dead-letter groups across partitions.
	_, body = get(t, c, srv.URL+"/deadletters?t=0")
	csrf := csrfFrom(body)
	if !strings.Contains(body, "invoice.sent") || !strings.Contains(body, "3</td>") || csrf == "" {
		t.Fatalf("the dead-letter page lacks the group of 3:\n%s", body)
	}
	groupKey := regexp.MustCompile(`name="g" value="([^"]+)"`).FindStringSubmatch(body)
	if groupKey == nil {
		t.Fatalf("no group form:\n%s", body)
	}
	// Replay the group: the confirmation counts 3 and carries their IDs;
	// a dead letter joining the group meanwhile is not replayed.
	resp, body = post(t, c, srv.URL+"/deadletters/confirm", url.Values{"csrf": {csrf}, "t": {"0"}, "action": {"replay"}, "scope": {"group"}, "g": {groupKey[1]}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Replay 3 dead letter(s)?") {
		t.Fatalf("confirm the group's replay: %s\n%s", resp.Status, body)
	}
	m := idsFieldRE.FindStringSubmatch(body)
	if m == nil || !slices.Equal(sorted(strings.Split(m[1], ",")), strs(sent...)) {
		t.Fatalf("the confirmation carries %v, want %v", m, strs(sent...))
	}
	late := db.seed(t, seedEvent{Type: "invoice.sent", State: "dead", Err: "publish: 503 Service Unavailable (request 5)"})
	db.moveCreated(t, p+time.Minute, late...)
	resp, body = post(t, c, srv.URL+"/deadletters/apply", url.Values{"csrf": {csrf}, "t": {"0"}, "action": {"replay"}, "scope": {"group"}, "g": {groupKey[1]}, "id": {m[1]}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Replayed 3 dead-lettered event(s)") {
		t.Fatalf("apply the replay: %s\n%s", resp.Status, body)
	}
	var replayed, stillDead int
	tbl := pgx.Identifier{db.schema, postgres.DefaultTable}.Sanitize()
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE dead_at IS NULL AND published_at IS NULL AND attempts = 0), count(*) FILTER (WHERE dead_at IS NOT NULL) FROM `+tbl+` WHERE id = ANY($1::uuid[])`,
		append(strs(sent...), late[0].String())).Scan(&replayed, &stillDead); err != nil {
		t.Fatal(err)
	}
	if replayed != 3 || stillDead != 1 {
		t.Errorf("after the replay: %d pending under their IDs, %d still dead, want 3 and the late one", replayed, stillDead)
	}
	// Purge a selection: the late one and the voided one.
	sel := []string{late[0].String(), voided[0].String()}
	resp, body = post(t, c, srv.URL+"/deadletters/confirm", url.Values{"csrf": {csrf}, "t": {"0"}, "action": {"purge"}, "scope": {"selection"}, "id": sel})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Purge 2 dead letter(s)?") {
		t.Fatalf("confirm the purge: %s\n%s", resp.Status, body)
	}
	m = idsFieldRE.FindStringSubmatch(body)
	resp, body = post(t, c, srv.URL+"/deadletters/apply", url.Values{"csrf": {csrf}, "t": {"0"}, "action": {"purge"}, "scope": {"selection"}, "id": {m[1]}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Purged 2 dead-lettered event(s)") {
		t.Fatalf("apply the purge: %s\n%s", resp.Status, body)
	}
	var left, inboxLeft int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM `+inboxTbl+` WHERE dead_at IS NOT NULL`).Scan(&inboxLeft); err != nil {
		t.Fatal(err)
	}
	if left != len(ids)-1 || inboxLeft != 1 {
		t.Errorf("after the purge: %d outbox rows (want %d), %d inbox dead letters (want 1: untouched)", left, len(ids)-1, inboxLeft)
	}
}

// TestDuplicateIDAcrossPartitions: a foreign writer's second row with an
// event's ID, in another partition. The event page shows one row whole,
// names the other and links to it; the confirmation of a replay counts
// both rows, which the replay, acting on the ID, touches.
func TestDuplicateIDAcrossPartitions(t *testing.T) {
	t.Parallel()
	db := newDBLayout(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	ids := db.seed(t, seedEvent{Type: "invoice.sent", Payload: `{"mine":1}`, State: "dead", Err: "publish: 503"})
	db.moveCreated(t, 25*time.Hour, ids[0])
	tbl := pgx.Identifier{db.schema, postgres.DefaultTable}.Sanitize()
	if _, err := db.pool.Exec(ctx, `INSERT INTO `+tbl+` (id, event_type, payload, dead_at, last_error) VALUES ($1, 'foreign.copy', '{"foreign":2}', now(), 'other')`, ids[0].String()); err != nil {
		t.Fatal(err)
	}
	if got := len(db.partitionsOf(t, ids[0])); got != 2 {
		t.Fatalf("the ID sits in %d partitions, want 2", got)
	}
	srv, _ := newServer(t, db, nil)
	c := srv.Client()
	c.Jar = newJar(t)
	resp, body := get(t, c, srv.URL+"/event?t=0&id="+ids[0].String())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-f="copies"`) || !strings.Contains(body, "2 rows hold this ID") {
		t.Fatalf("the event page of a duplicated ID: %s\n%s", resp.Status, body)
	}
	// The oldest row, whole: its type, payload and error, none of the other's.
	if !strings.Contains(body, "invoice.sent") || !strings.Contains(body, "&#34;mine&#34;: 1") {
		t.Errorf("the event page does not show the first row alone:\n%s", body)
	}
	if strings.Contains(body, "&#34;foreign&#34;") || strings.Contains(body, ">other<") {
		t.Errorf("the event page mixes in the other row:\n%s", body)
	}
	link := regexp.MustCompile(`<a href="[^"]*/event\?([^"]*created=[^"]+)">`).FindStringSubmatch(body)
	if link == nil {
		t.Fatalf("no link to the other row:\n%s", body)
	}
	resp, body = get(t, c, srv.URL+"/event?"+html.UnescapeString(link[1]))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "foreign.copy") || !strings.Contains(body, "&#34;foreign&#34;: 2") || strings.Contains(body, "&#34;mine&#34;") {
		t.Errorf("the other row's page: %s\n%s", resp.Status, body)
	}
	// The first row's group has one member, but its ID two rows: the
	// group's confirmation counts both, as the apply acts on both.
	_, dl := get(t, c, srv.URL+"/deadletters?t=0")
	g := regexp.MustCompile(`name="g" value="([^"]+)"`).FindAllStringSubmatch(dl, -1)
	if len(g) != 2 {
		t.Fatalf("%d groups, want 2 (invoice.sent and foreign.copy):\n%s", len(g), dl)
	}
	for _, k := range g {
		resp, cb := post(t, c, srv.URL+"/deadletters/confirm", url.Values{"csrf": {csrfFrom(dl)}, "t": {"0"}, "action": {"purge"}, "scope": {"group"}, "g": {k[1]}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(cb, "Purge 2 dead letter(s)?") {
			t.Errorf("confirm a group's purge: %s\n%s", resp.Status, cb)
		}
	}
	// The events list links each row to its own page.
	_, list := get(t, c, srv.URL+"/events?t=0&state=dead&type=foreign.copy")
	link = regexp.MustCompile(`<td class="id"><a href="[^"]*/event\?([^"]+)">`).FindStringSubmatch(list)
	if link == nil {
		t.Fatalf("no foreign.copy row listed:\n%s", list)
	}
	if _, b := get(t, c, srv.URL+"/event?"+html.UnescapeString(link[1])); !strings.Contains(b, "&#34;foreign&#34;: 2") {
		t.Errorf("the list's link opens another row:\n%s", b)
	}
	// Replaying the ID from its page: the confirmation counts both rows.
	resp, body = post(t, c, srv.URL+"/deadletters/confirm", url.Values{"csrf": {csrfFrom(body)}, "t": {"0"}, "action": {"replay"}, "scope": {"selection"}, "id": {ids[0].String()}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Replay 2 dead letter(s)?") || !strings.Contains(body, `data-f="shared"`) {
		t.Fatalf("confirm the replay of a duplicated ID: %s\n%s", resp.Status, body)
	}
	m := idsFieldRE.FindStringSubmatch(body)
	resp, body = post(t, c, srv.URL+"/deadletters/apply", url.Values{"csrf": {csrfFrom(body)}, "t": {"0"}, "action": {"replay"}, "scope": {"selection"}, "id": {m[1]}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Replayed 2 dead-lettered event(s)") {
		t.Fatalf("apply: %s\n%s", resp.Status, body)
	}
	var dead int
	_ = db.pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl+` WHERE dead_at IS NOT NULL`).Scan(&dead)
	if dead != 0 {
		t.Errorf("%d dead letters left", dead)
	}
}

// TestOverviewWarnsOfDefaultPartitionRows: rows of a period with no
// partition land in the default partition; the overview counts them and
// warns, dead letters there aside (Maintain moves those of dropped
// partitions there).
func TestOverviewWarnsOfDefaultPartitionRows(t *testing.T) {
	t.Parallel()
	db := newDBLayout(t, postgres.PartitionHourly)
	tbl := pgx.Identifier{db.schema, postgres.DefaultTable}.Sanitize()
	if _, err := db.pool.Exec(ctxT(t), `INSERT INTO `+tbl+` (event_type, payload, created_at, dead_at) VALUES
('far.future', '{}', now() + interval '30 days', NULL), ('far.past', '{}', now() - interval '30 days', NULL), ('old.dead', '{}', now() - interval '40 days', now())`); err != nil {
		t.Fatal(err)
	}
	srv, _ := newServer(t, db, nil)
	var ov overview
	_, body := get(t, srv.Client(), srv.URL+"/api/overview")
	if err := json.Unmarshal([]byte(body), &ov); err != nil {
		t.Fatal(err)
	}
	l := ov.Targets[0].Layout
	if l == nil || l.Kind != "hourly" || l.Default != "outbox_events_default" || l.DefaultRows != 2 || l.DefaultDead != 1 || l.DefaultMore {
		t.Fatalf("layout %+v, want hourly with 2 rows and 1 dead letter in outbox_events_default", l)
	}
	_, page := get(t, srv.Client(), srv.URL+"/")
	for _, want := range []string{`data-f="default-rows"`, "Partition maintenance is behind", "2 pending or published event(s)", "retention leader", "1 dead letter(s)"} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview lacks %q:\n%s", want, page)
		}
	}
}

// TestLayoutOfOtherWidths: partitions of a width outboxkit does not
// create (a table partitioned by hand) are named by their width.
func TestLayoutOfOtherWidths(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := ctxT(t)
	tbl := pgx.Identifier{db.schema, "quarters"}.Sanitize()
	stmts := []string{`CREATE TABLE ` + tbl + ` (id uuid NOT NULL, created_at timestamptz NOT NULL, published_at timestamptz, dead_at timestamptz) PARTITION BY RANGE (created_at)`,
		`CREATE TABLE ` + pgx.Identifier{db.schema, "quarters_a"}.Sanitize() + ` PARTITION OF ` + tbl + ` FOR VALUES FROM ('2026-01-01 00:00Z') TO ('2026-01-01 00:15Z')`,
		`CREATE TABLE ` + pgx.Identifier{db.schema, "quarters_b"}.Sanitize() + ` PARTITION OF ` + tbl + ` FOR VALUES FROM ('2026-01-01 00:15Z') TO ('2026-01-01 00:30Z')`,
		`CREATE TABLE ` + pgx.Identifier{db.schema, "quarters_old"}.Sanitize() + ` PARTITION OF ` + tbl + ` FOR VALUES FROM (MINVALUE) TO ('2026-01-01 00:00Z')`,
	}
	for _, s := range stmts {
		if _, err := db.pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	l, err := readLayout(ctx, db.pool, newTableNames(db.schema, "quarters"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Kind != "15-minute" || l.Partitions != 3 || l.Legacy != "quarters_old" || l.Default != "" ||
		l.Oldest == nil || !l.Oldest.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || !l.Newest.Equal(time.Date(2026, 1, 1, 0, 15, 0, 0, time.UTC)) {
		t.Errorf("layout %+v", l)
	}
	if got := l.Period(l.Newest); got != "2026-01-01 00:15" {
		t.Errorf("the newest period reads %q", got)
	}
	if l, err := readLayout(ctx, db.pool, newTableNames(db.schema, "outbox_events")); err != nil || l.Kind != "plain" || l.Partitioned() {
		t.Errorf("the plain table's layout: %+v %v", l, err)
	}
}

// TestPruneRange: the filter widened to the partition bounds around it,
// none where a partition from MINVALUE (legacy) would be cut.
func TestPruneRange(t *testing.T) {
	t.Parallel()
	day := func(d int) time.Time { return time.Date(2026, 12, d, 0, 0, 0, 0, time.UTC) }
	at := func(d, h int) *time.Time { v := day(d).Add(time.Duration(h) * time.Hour); return &v }
	parts := []partition{
		{Name: "legacy", To: day(2)},
		{Name: "p2", From: day(2), To: day(3)},
		// day 3 dropped: a gap
		{Name: "p4", From: day(4), To: day(5)},
		{Name: "p5", From: day(5), To: day(6)},
		{Name: "default", Default: true},
	}
	for _, tc := range []struct {
		name         string
		since, until *time.Time
		from, to     *time.Time
	}{
		{"inside a period", at(4, 10), at(5, 3), at(4, 0), at(6, 0)},
		{"on a bound", at(4, 0), at(5, 0), at(4, 0), at(5, 0)},
		{"in a gap", at(3, 12), nil, at(3, 0), nil},
		{"in the legacy range", at(1, 12), at(1, 13), nil, at(2, 0)},
		{"after every period", at(7, 0), at(8, 0), at(6, 0), nil},
		{"none", nil, nil, nil, nil},
	} {
		from, to := pruneRange(parts, tc.since, tc.until)
		eq := func(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
		if !eq(from, tc.from) || !eq(to, tc.to) {
			t.Errorf("%s: [%v, %v), want [%v, %v)", tc.name, from, to, tc.from, tc.to)
		}
	}
}

// A partition dropped while the overview reads the catalog is left out
// (its bound prints as NULL then), rather than failing the page.
func TestReadPartitionsWhileDropping(t *testing.T) {
	t.Parallel()
	db := newDBLayout(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	n := newTableNames(db.schema, postgres.DefaultTable)
	done := pgtest.ChurnPartitions(ctx, t, db.pool, db.schema, postgres.DefaultTable, 300)
	reads := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if reads == 0 {
				t.Fatal("no read ran while partitions were created and dropped")
			}
			return
		default:
		}
		if _, _, err := readPartitions(ctx, db.pool, n); err != nil {
			t.Fatalf("readPartitions while a partition is dropped (after %d reads): %v", reads, err)
		}
		reads++
	}
}
