package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// tenantLabels are a tenant's metric labels in the test database.
func tenantLabels(schema string, extra ...string) map[string]string {
	m := map[string]string{"database": databaseLabel(pgtest.URL()), "schema": schema, "table": "outbox_events"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// TestRelayServiceMetrics runs a known scenario through two tenants of one
// process and reads /metrics: per tenant, the pending count and the oldest
// pending age of events not due yet, the dead letters (some from before
// the relay, some it made of poison rows), and the settled counts of what
// it published and dead-lettered. /healthz says alive.
func TestRelayServiceMetrics(t *testing.T) {
	t.Parallel()
	a, b := newOutbox(t), newOutbox(t)
	q := newDevQStash(t, nil)

	// Tenant a: 3 dead-lettered and 2 published before the relay starts.
	for i := 0; i < 3; i++ {
		a.add(t, event(t, "old.dead", "order", fmt.Sprint(i)))
	}
	a.settle(t, func(core.Event) core.OutcomeKind { return core.DeadLettered }, "poisoned")
	for i := 0; i < 2; i++ {
		a.add(t, event(t, "old.published", "order", fmt.Sprint(i)))
	}
	a.settle(t, func(core.Event) core.OutcomeKind { return core.Published }, "")
	// 4 pending, created an hour ago and due in an hour: they stay pending.
	for i := 0; i < 4; i++ {
		a.exec(t, "INSERT INTO "+a.table()+" (id, event_type, payload, created_at, available_at) VALUES ($1, 'later', '{}', now() - interval '1 hour', now() + interval '1 hour')",
			core.NewID().String())
	}
	// 7 due events the relay publishes and 2 poison rows (a control
	// character in the type) it dead-letters.
	published := a.insertSQL(t, 7, "order.placed")
	for i := 0; i < 2; i++ {
		a.exec(t, "INSERT INTO "+a.table()+" (id, event_type, payload) VALUES ($1, 'poison' || chr(1), '{}')", core.NewID().String())
	}
	// Tenant b: one event.
	b.insertSQL(t, 1, "invoice.sent")

	p := start(t, qstashEnv(), q.relayArgs(a, "--schemas", a.schema+","+b.schema, "--wakeup", "listen", "--log-stats-interval", "1s")...)
	base := httpAddr(t, p)
	waitFor(t, 30*time.Second, "the due events at the consumer", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return len(q.got()) == len(published)+1
	})
	waitFor(t, 30*time.Second, "the settled counts in /metrics", func() bool {
		m := scrape(t, base)
		pa, _ := metricSum(m, "outboxkit_events_settled_total", tenantLabels(a.schema, "outboxkit_outcome", "published"))
		da, _ := metricSum(m, "outboxkit_events_settled_total", tenantLabels(a.schema, "outboxkit_outcome", "dead_lettered"))
		pb, _ := metricSum(m, "outboxkit_events_settled_total", tenantLabels(b.schema, "outboxkit_outcome", "published"))
		return pa == 7 && da == 2 && pb == 1
	})
	m := scrape(t, base)
	want := func(name, schema string, lo, hi float64) {
		t.Helper()
		v, ok := metricSum(m, name, tenantLabels(schema))
		if !ok {
			t.Errorf("%s{schema=%q} missing from /metrics", name, schema)
			return
		}
		if v < lo || v > hi {
			t.Errorf("%s{schema=%q} = %v, want %v..%v", name, schema, v, lo, hi)
		}
	}
	want("outboxkit_events_pending", a.schema, 4, 4)
	want("outboxkit_events_oldest_pending_age_seconds", a.schema, 3600, 3700)
	want("outboxkit_events_dead_lettered", a.schema, 5, 5)
	want("outboxkit_events_leased", a.schema, 0, 0)
	want("outboxkit_events_pending", b.schema, 0, 0)
	want("outboxkit_events_oldest_pending_age_seconds", b.schema, 0, 0)
	want("outboxkit_events_dead_lettered", b.schema, 0, 0)
	want("outboxkit_events_settled_total", b.schema, 1, 1)
	want("outboxkit_events_attempts_count", a.schema, 9, 9) // 7 published + 2 dead, once each
	want("outboxctl_tenant_ready", a.schema, 1, 1)
	want("outboxctl_tenant_ready", b.schema, 1, 1)
	if v, ok := metricSum(m, "outboxkit_publish_duration_seconds_count", tenantLabels(a.schema, "messaging_system", "qstash")); !ok || v < 1 {
		t.Errorf("outboxkit_publish_duration_seconds_count for tenant a = %v (found %v), want at least one publish", v, ok)
	}
	if v, _ := metricSum(m, "outboxctl_ready", nil); v != 1 {
		t.Errorf("outboxctl_ready = %v, want 1", v)
	}
	if _, ok := metricSum(m, "process_resident_memory_bytes", nil); !ok {
		t.Error("/metrics lacks the process collector's process_resident_memory_bytes")
	}
	for _, s := range m {
		for k, v := range s.labels {
			if k == "database" && strings.Contains(v, "postgres") {
				t.Errorf("database label %q carries the URL's user", v)
			}
		}
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || !strings.Contains(body, "alive") {
		t.Errorf("/healthz answered %d %s", code, body)
	}
	if code, rep := readyz(t, base); code != http.StatusOK || !rep.Ready || len(rep.Tenants) != 2 {
		t.Errorf("/readyz answered %d %+v, want 200 with two ready tenants", code, rep)
	}
	// The throughput line: per tenant, and summed up.
	waitFor(t, 10*time.Second, "the throughput lines", func() bool {
		var pub float64
		for _, l := range logLines(p, "tenant throughput") {
			if l["schema"] == a.schema {
				pub += l["published"].(float64)
			}
		}
		return pub == 7 && len(logLines(p, "relay throughput")) > 0
	})
	if code, _ := get(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ answered %d without --pprof, want 404", code)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM, want 0:\n%s", code, p.stderr)
	}
}

// TestRelayServiceReadinessFollowsTheDatabase cuts the relay off from
// PostgreSQL through a TCP proxy: /readyz turns 503 within 5 s, saying
// why, while /healthz stays 200; once the proxy is back /readyz is 200
// again, the log says the database came back, and events flow.
func TestRelayServiceReadinessFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	px := newTCPProxy(t, pgAddr(t))
	p := start(t, qstashEnv(), q.relayArgs(o, "--database-url", proxiedURL(t, px), "--wakeup", "poll", "--pprof")...)
	base := httpAddr(t, p)
	waitFor(t, 30*time.Second, "/readyz 200", func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	if code, _ := get(t, base+"/debug/pprof/cmdline"); code != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline answered %d with --pprof", code)
	}

	px.cut()
	cutAt := time.Now()
	waitFor(t, 5*time.Second, "/readyz 503 for the database gone", func() bool {
		code, rep := readyz(t, base)
		return code == http.StatusServiceUnavailable && len(rep.Databases) == 1 && !rep.Databases[0].Up
	})
	t.Logf("/readyz turned 503 %s after the cut", time.Since(cutAt).Round(time.Millisecond))
	code, rep := readyz(t, base)
	if code != http.StatusServiceUnavailable || rep.Ready || rep.Status != "not ready" ||
		len(rep.Databases) != 1 || rep.Databases[0].Up || !strings.Contains(strings.Join(rep.Reasons, "|"), "database") {
		t.Errorf("/readyz while the database is away: %d %+v", code, rep)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz answered %d while the database is away, want 200", code)
	}
	if m := scrape(t, base); true {
		if v, ok := metricSum(m, "outboxctl_database_up", nil); !ok || v != 0 {
			t.Errorf("outboxctl_database_up = %v (found %v) while the database is away, want 0", v, ok)
		}
	}

	px.restore(t)
	waitFor(t, 30*time.Second, "/readyz 200 after the database came back", func() bool {
		if p.exited() {
			t.Fatalf("relay exited (code %d):\n%s", p.code, p.stderr)
		}
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	waitFor(t, 10*time.Second, "log lines for the database going and coming back", func() bool {
		return len(logLines(p, "PostgreSQL reachable again")) > 0 && len(logLines(p, "PostgreSQL unreachable")) > 0
	})
	ids := o.insertSQL(t, 3, "order.placed")
	waitFor(t, 30*time.Second, "events relayed after the database came back", func() bool { return len(q.got()) == len(ids) })
}

// TestRelayServiceTenSchemas runs ten tenants in one process; dropping one
// tenant's table mid-run stops that tenant only: it is reported (/readyz,
// the log, outboxctl_tenant_failures_total) and retried, the other nine
// keep relaying, and it recovers once migrated again.
func TestRelayServiceTenSchemas(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	q := newDevQStash(t, nil)
	schemas := make([]string, 10)
	tenants := make([]outbox, 10)
	for i := range schemas {
		schemas[i] = pgtest.Schema(t, pool, "tenant")
		if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schemas[i]}); err != nil {
			t.Fatal(err)
		}
		tenants[i] = outbox{pool: pool, schema: schemas[i]}
	}
	first := map[string][]core.ID{}
	for i, o := range tenants {
		first[o.schema] = o.insertSQL(t, i+1, "order.placed")
	}
	args := q.relayArgs(tenants[0], "--schemas", strings.Join(schemas, ","), "--wakeup", "listen", "--concurrency", "1")
	p := start(t, qstashEnv(), args...)
	base := httpAddr(t, p)
	total := 55
	waitFor(t, 60*time.Second, "every tenant's events at the consumer", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return len(q.got()) == total
	})
	waitFor(t, 20*time.Second, "per-tenant settled counts", func() bool {
		m := scrape(t, base)
		for i, s := range schemas {
			if v, _ := metricSum(m, "outboxkit_events_settled_total", tenantLabels(s, "outboxkit_outcome", "published")); v != float64(i+1) {
				return false
			}
		}
		return true
	})

	dropped := tenants[3]
	dropped.exec(t, "DROP TABLE "+dropped.table()+" CASCADE")
	waitFor(t, 30*time.Second, "the dropped tenant reported", func() bool {
		code, rep := readyz(t, base)
		if code != http.StatusServiceUnavailable {
			return false
		}
		for _, ts := range rep.Tenants {
			if ts.Schema == dropped.schema {
				return ts.State == tenantFailed && strings.Contains(ts.Reason, "missing or out of date") && ts.Failures >= 1
			}
		}
		return false
	})
	code, rep := readyz(t, base)
	ready := 0
	for _, ts := range rep.Tenants {
		if ts.Ready {
			ready++
		}
	}
	if code != http.StatusServiceUnavailable || ready != 9 || len(rep.Tenants) != 10 {
		t.Errorf("/readyz with one tenant dropped: %d, %d of %d tenants ready, want 503 and 9 of 10", code, ready, len(rep.Tenants))
	}
	if v, _ := metricSum(scrape(t, base), "outboxctl_tenant_failures_total", tenantLabels(dropped.schema)); v < 1 {
		t.Errorf("outboxctl_tenant_failures_total for the dropped tenant = %v, want ≥ 1", v)
	}
	if len(logLines(p, "tenant failed; its relay is stopped and retried, the other tenants go on")) == 0 {
		t.Errorf("no log line for the failed tenant:\n%s", p.stderr)
	}

	// The other nine keep relaying.
	var more []core.ID
	for i, o := range tenants {
		if i != 3 {
			more = append(more, o.insertSQL(t, 2, "order.shipped")...)
		}
	}
	waitFor(t, 30*time.Second, "the other tenants' new events at the consumer", func() bool {
		got := q.got()
		for _, id := range more {
			if got[id] == 0 {
				return false
			}
		}
		return true
	})

	// Migrated again, the tenant recovers. (The migrations' bookkeeping
	// outlived the table: start the schema over.)
	dropped.exec(t, "DROP SCHEMA "+pgx.Identifier{dropped.schema}.Sanitize()+" CASCADE")
	dropped.exec(t, "CREATE SCHEMA "+pgx.Identifier{dropped.schema}.Sanitize())
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: dropped.schema}); err != nil {
		t.Fatal(err)
	}
	back := dropped.insertSQL(t, 2, "order.placed")
	waitFor(t, 90*time.Second, "the recovered tenant's events", func() bool {
		got := q.got()
		return got[back[0]] > 0 && got[back[1]] > 0
	})
	waitFor(t, 30*time.Second, "/readyz 200 again", func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	if len(logLines(p, "tenant recovered")) == 0 {
		t.Errorf("no log line for the recovered tenant")
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM, want 0:\n%s", code, p.stderr)
	}
}

// TestRelayServiceDiscoversSchemas: --schemas '*' relays every schema
// holding the table, finds one migrated later, and lets go of one whose
// table is dropped. The table has a name of its own, so schemas of other
// tests running against the same database are not found.
func TestRelayServiceDiscoversSchemas(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 4)
	q := newDevQStash(t, nil)
	table := "disc_" + strings.ToLower(core.NewID().String()[:8])
	migrate := func() outbox {
		s := pgtest.Schema(t, pool, "disc")
		if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: s, Table: table}); err != nil {
			t.Fatal(err)
		}
		return outbox{pool: pool, schema: s}
	}
	insert := func(o outbox, n int) []core.ID {
		ids := make([]core.ID, n)
		for i := range ids {
			ids[i] = core.NewID()
			o.exec(t, "INSERT INTO "+pgx.Identifier{o.schema, table}.Sanitize()+" (id, event_type, payload) VALUES ($1, 'x', '{}')", ids[i].String())
		}
		return ids
	}
	x, y := migrate(), migrate()
	insert(x, 2)
	insert(y, 3)
	p := start(t, qstashEnv(), "relay", "--qstash-url", q.url, "--destination", q.consumer, "--log-format", "json",
		"--schemas", "*", "--table", table, "--discover-interval", "200ms", "--wakeup", "poll", "--poll-interval", "50ms")
	base := httpAddr(t, p)
	waitFor(t, 30*time.Second, "both schemas' events", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return len(q.got()) == 5
	})
	z := migrate()
	ids := insert(z, 4)
	waitFor(t, 30*time.Second, "the new schema's events", func() bool {
		got := q.got()
		for _, id := range ids {
			if got[id] == 0 {
				return false
			}
		}
		return true
	})
	if len(logLines(p, "tenant found")) != 1 {
		t.Errorf("want one \"tenant found\" line for the new schema")
	}
	x.exec(t, "DROP TABLE "+pgx.Identifier{x.schema, table}.Sanitize()+" CASCADE")
	waitFor(t, 30*time.Second, "the dropped schema let go", func() bool {
		code, rep := readyz(t, base)
		return code == http.StatusOK && len(rep.Tenants) == 2
	})
	_, rep := readyz(t, base)
	for _, ts := range rep.Tenants {
		if ts.Schema == x.schema || ts.Table != table {
			t.Errorf("tenant %+v after the drop", ts)
		}
	}
}

// TestRelayServiceWaitsForDependencies: with --wait the relay starts while
// PostgreSQL is away, /readyz says what it waits for, and the relay runs
// once the database is there. Without --wait it exits 2 at once.
func TestRelayServiceWaitsForDependencies(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	px := newTCPProxy(t, pgAddr(t))
	px.cut()
	dbURL := proxiedURL(t, px)

	r := cli(t, qstashEnv(), q.relayArgs(o, "--database-url", dbURL)...)
	wantOneLineError(t, r, exitError, "cannot reach PostgreSQL")

	p := start(t, qstashEnv(), q.relayArgs(o, "--database-url", dbURL, "--wait", "2m", "--wakeup", "poll")...)
	base := httpAddr(t, p)
	waitFor(t, 20*time.Second, "/readyz saying it waits for PostgreSQL", func() bool {
		code, rep := readyz(t, base)
		return code == http.StatusServiceUnavailable && rep.Status == "waiting" &&
			strings.Contains(strings.Join(rep.Reasons, "|"), "waiting for PostgreSQL")
	})
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz answered %d while waiting, want 200", code)
	}
	ids := o.insertSQL(t, 2, "order.placed")
	px.restore(t)
	waitFor(t, 60*time.Second, "the relay started after the wait", func() bool {
		if p.exited() {
			t.Fatalf("relay exited (code %d):\n%s", p.code, p.stderr)
		}
		return len(q.got()) == len(ids)
	})
	waitFor(t, 20*time.Second, "/readyz 200", func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	if len(logLines(p, "dependency available")) == 0 {
		t.Errorf("no log line when PostgreSQL came")
	}

	// A wait that runs out is the usual error.
	px2 := newTCPProxy(t, pgAddr(t))
	px2.cut()
	r = cli(t, qstashEnv(), q.relayArgs(o, "--database-url", proxiedURL(t, px2), "--wait", "1s")...)
	if r.code != exitError || !strings.Contains(r.stderr, "cannot reach PostgreSQL") || !strings.Contains(r.stderr, "--wait 1") {
		t.Errorf("a wait that ran out: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestRelayConfigFile: the --config file sets what flags and environment
// variables do not, flags and environment win over it, --print-config
// shows the result with secrets redacted, and mistakes in the file are
// one-line errors.
func TestRelayConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "relay.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`# a relay of two tenants
database-url: postgres://app:${DB_PASSWORD}@db.internal:5432/prod
schemas: [tenant_a, tenant_b]
schema: from_file
destination: https://billing.example.com/qstash/orders
batch-size: 250
concurrency: 3
lease: 1m
qstash-url: https://qstash.example.com
qstash-token: file-token
databases:
  - name: eu
    url: postgres://eu:eupass@eu.internal/app
    schemas: "*"
    max-conns: 7
`)
	// DATABASE_URL would win over the file's database-url.
	noDB := func(extra ...string) []string { return withoutEnv(env(extra...), "DATABASE_URL") }
	r := cli(t, noDB("DB_PASSWORD=s3cr3t", "QSTASH_TOKEN=env-token"), "relay", "--config", file, "--concurrency", "5", "--print-config")
	wantOK(t, r)
	for _, want := range []string{
		"batch-size: 250", // from the file
		"concurrency: 5",  // the flag wins
		"lease: 1m\n",
		"schemas: tenant_a,tenant_b",
		"schema: from_file\n",
		"destination: https://billing.example.com/qstash/orders",
		`qstash-token: '***'`,
		"database-url: postgres://app:***@db.internal:5432/prod",
		"name: eu", "max-conns: 7", "url: postgres://eu:***@eu.internal/app",
	} {
		if !strings.Contains(r.stdout, want) && !strings.Contains(r.stdout, strings.ReplaceAll(want, "'", `"`)) {
			t.Errorf("--print-config lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, secret := range []string{"s3cr3t", "file-token", "env-token", "eupass"} {
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("--print-config shows the secret %q:\n%s", secret, r.stdout)
		}
	}
	// The printed configuration is a config file itself.
	printed := filepath.Join(dir, "printed.yaml")
	if err := os.WriteFile(printed, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	r2 := cli(t, noDB("DB_PASSWORD=s3cr3t", "QSTASH_TOKEN=env-token"), "relay", "--config", printed, "--print-config")
	wantOK(t, r2)
	if r2.stdout != r.stdout {
		t.Errorf("printing the printed configuration changed it:\n%s\nvs\n%s", r.stdout, r2.stdout)
	}
	// So does a global flag given before the command name.
	r = cli(t, noDB(), "--schema", "top_level", "relay", "--config", file, "--print-config")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "schema: top_level\n") {
		t.Errorf("--schema before the command did not win over the file:\n%s", r.stdout)
	}
	// An environment variable wins over the file.
	r = cli(t, noDB("QSTASH_URL=https://from-env.example.com"), "relay", "--config", file, "--print-config")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "qstash-url: https://from-env.example.com") {
		t.Errorf("QSTASH_URL did not win over the file:\n%s", r.stdout)
	}

	for _, tc := range []struct{ file, want string }{
		{"batch-sise: 10\n", `unknown key "batch-sise"`},
		{"batch-size: many\n", "batch-size"},
		{"schemas: *\n", "quote"},
		{"- a\n- b\n", "mapping"},
		{"databases:\n  - name: x\n", "no url"},
		{"databases:\n  - url: postgres://h/d\n    colour: blue\n", `unknown key "colour"`},
	} {
		write(tc.file)
		r := cli(t, env(), "relay", "--config", file, "--print-config")
		wantOneLineError(t, r, exitError, "--config "+file, tc.want)
	}
	r = cli(t, env(), "relay", "--config", filepath.Join(dir, "missing.yaml"))
	wantOneLineError(t, r, exitError, "missing.yaml")
}

// TestRelayServiceFlags: service settings that cannot work are refused
// before anything connects.
func TestRelayServiceFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-addr", "9464"}, "--http-addr"},
		{[]string{"--http-addr", "", "--pprof"}, "--pprof needs --http-addr"},
		{[]string{"--max-conns", "-1"}, "--max-conns"},
		{[]string{"--vacuum-interval", "-1s"}, `invalid value "-1s" for flag --vacuum-interval: negative`},
		{[]string{"--schemas", "a,*"}, "'*' stands alone"},
		{[]string{"--schemas", "tenant_*"}, "patterns are not supported"},
	} {
		r := cli(t, qstashEnv(), append([]string{"relay", "--destination", "https://example.com/hook"}, tc.args...)...)
		wantOneLineError(t, r, exitError, tc.want)
	}
	// A busy --http-addr is an error at start.
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	first := start(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll")...)
	addr := strings.TrimPrefix(httpAddr(t, first), "http://")
	r := cli(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll", "--http-addr", addr)...)
	wantOneLineError(t, r, exitError, "--http-addr "+addr, "address already in use")
}

// TestRelayServiceFollowsTheTransport: with --wait the relay waits for an
// unreachable QStash, /readyz saying so; once it runs, QStash going away
// turns /readyz to 503 (the probe runs every 10 s) and coming back to 200,
// with a log line for each.
func TestRelayServiceFollowsTheTransport(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	px := newTCPProxy(t, strings.TrimPrefix(q.url, "http://"))
	px.cut()
	p := start(t, qstashEnv(), o.args("relay", "--qstash-url", "http://"+px.addr, "--destination", q.consumer,
		"--log-format", "json", "--wakeup", "poll", "--wait", "2m")...)
	base := httpAddr(t, p)
	waitFor(t, 20*time.Second, "/readyz saying it waits for the transport", func() bool {
		code, rep := readyz(t, base)
		return code == http.StatusServiceUnavailable && strings.Contains(strings.Join(rep.Reasons, "|"), "waiting for the transport")
	})
	px.restore(t)
	waitFor(t, 30*time.Second, "/readyz 200", func() bool {
		if p.exited() {
			t.Fatalf("relay exited (code %d):\n%s", p.code, p.stderr)
		}
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	px.cut()
	waitFor(t, 30*time.Second, "/readyz 503 with QStash away", func() bool {
		code, rep := readyz(t, base)
		return code == http.StatusServiceUnavailable && rep.Transport != nil && !rep.Transport.Up &&
			strings.Contains(strings.Join(rep.Reasons, "|"), "cannot reach QStash")
	})
	if v, _ := metricSum(scrape(t, base), "outboxctl_transport_up", map[string]string{"transport": "qstash"}); v != 0 {
		t.Errorf("outboxctl_transport_up = %v with QStash away, want 0", v)
	}
	px.restore(t)
	waitFor(t, 30*time.Second, "/readyz 200 with QStash back", func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
	// The line may follow /readyz's 200 by a moment: wait for it (read
	// once, it was missed in CI).
	waitFor(t, 10*time.Second, "log lines for QStash going and coming back", func() bool {
		return len(logLines(p, "transport unreachable")) > 0 && len(logLines(p, "transport reachable again")) > 0
	})
}

// TestRelayServiceDefaultAddressBusy: when the default :9464 is taken (a
// second relay on the host), the relay warns and runs without endpoints;
// an address given explicitly must be free (TestRelayServiceFlags).
func TestRelayServiceDefaultAddressBusy(t *testing.T) {
	t.Parallel()
	if ln, err := net.Listen("tcp", defaultHTTPAddr); err == nil {
		// Held for the test; if it cannot be had, something else holds it,
		// which serves as well.
		t.Cleanup(func() { ln.Close() })
	}
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	ids := o.insertSQL(t, 2, "order.placed")
	r := cli(t, withoutEnv(qstashEnv(), "OUTBOX_HTTP_ADDR"), o.args("relay", "--qstash-url", q.url, "--destination", q.consumer, "--drain")...)
	wantOK(t, r) // --drain serves nothing
	p := start(t, withoutEnv(qstashEnv(), "OUTBOX_HTTP_ADDR"), q.relayArgs(o, "--wakeup", "poll")...)
	more := o.insertSQL(t, 2, "order.placed")
	waitFor(t, 30*time.Second, "events relayed without endpoints", func() bool {
		if p.exited() {
			t.Fatalf("relay exited (code %d):\n%s", p.code, p.stderr)
		}
		return len(q.got()) == len(ids)+len(more)
	})
	if !strings.Contains(p.stderr.String(), "address already in use") || !strings.Contains(p.stderr.String(), "serves no endpoints") {
		t.Errorf("no warning about the busy default address:\n%s", p.stderr)
	}
}

// TestRelayServiceDatabasesFromConfig relays two databases named in the
// --config file (the test server, directly and through a proxy, so that
// one can go away alone): each has its label in /metrics and /readyz, and
// while the proxied one is cut off the direct one's events keep flowing.
func TestRelayServiceDatabasesFromConfig(t *testing.T) {
	t.Parallel()
	a, b := newOutbox(t), newOutbox(t)
	q := newDevQStash(t, nil)
	px := newTCPProxy(t, pgAddr(t))
	file := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`destination: %s
qstash-url: %s
wakeup: poll
poll-interval: 50ms
log-format: json
databases:
  - name: direct
    url: ${DIRECT_URL}
    schemas: [%s]
  - name: proxied
    url: ${PROXIED_URL}
    schemas: [%s]
    max-conns: 3
`, q.consumer, q.url, a.schema, b.schema)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := withoutEnv(env("QSTASH_TOKEN="+qstashdev.DefaultToken, "DIRECT_URL="+pgtest.URL(), "PROXIED_URL="+proxiedURL(t, px)), "DATABASE_URL")
	p := start(t, environ, "relay", "--config", file)
	base := httpAddr(t, p)
	first := append(a.insertSQL(t, 2, "order.placed"), b.insertSQL(t, 3, "order.placed")...)
	waitFor(t, 30*time.Second, "both databases' events", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		return len(q.got()) == len(first)
	})
	// QStash can deliver an event before the relay has settled and counted
	// it: poll /metrics until each database's count has all its events.
	waitFor(t, 30*time.Second, "the settled counts labelled database=direct and database=proxied", func() bool {
		m := scrape(t, base)
		direct, _ := metricSum(m, "outboxkit_events_settled_total", map[string]string{"database": "direct", "schema": a.schema, "outboxkit_outcome": "published"})
		proxied, _ := metricSum(m, "outboxkit_events_settled_total", map[string]string{"database": "proxied", "schema": b.schema, "outboxkit_outcome": "published"})
		return direct >= 2 && proxied >= 3
	})

	px.cut()
	waitFor(t, 10*time.Second, "/readyz naming the proxied database", func() bool {
		code, rep := readyz(t, base)
		return code == http.StatusServiceUnavailable && strings.Contains(strings.Join(rep.Reasons, "|"), "database proxied")
	})
	_, rep := readyz(t, base)
	for _, d := range rep.Databases {
		if d.Up != (d.Database == "direct") {
			t.Errorf("database %s up=%v with the proxy cut", d.Database, d.Up)
		}
	}
	more := a.insertSQL(t, 3, "order.shipped")
	waitFor(t, 30*time.Second, "the direct database's events while the other is away", func() bool {
		got := q.got()
		for _, id := range more {
			if got[id] == 0 {
				return false
			}
		}
		return true
	})
	px.restore(t)
	waitFor(t, 30*time.Second, "/readyz 200 again", func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	})
}
