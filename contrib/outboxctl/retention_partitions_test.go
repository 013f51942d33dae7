package main

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// newPartitionedOutbox is newOutbox with the tables partitioned by layout.
func newPartitionedOutbox(t *testing.T, layout postgres.Partitioning) outbox {
	t.Helper()
	pool := pgtest.Pool(t, 4)
	schema := pgtest.Schema(t, pool, "outboxctl_parts")
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schema, Partitions: layout}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return outbox{pool: pool, schema: schema, store: store}
}

func (o outbox) partitions(t *testing.T) *postgres.Partitions {
	t.Helper()
	p, err := postgres.NewPartitions(o.pool, &postgres.PartitionsConfig{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// partitionNames lists the partitions of the outbox and processed tables.
func (o outbox) partitionNames(t *testing.T) map[string]postgres.PartitionInfo {
	t.Helper()
	parts, err := o.listPartitions(t)
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// listPartitions is partitionNames' listing, its error returned: a
// listing can fail while another session drops a partition (Partitions.List
// reads the bound of a partition dropped since its snapshot as NULL).
func (o outbox) listPartitions(t *testing.T) (map[string]postgres.PartitionInfo, error) {
	t.Helper()
	parts, err := o.partitions(t).List(ctxT(t))
	if err != nil {
		return nil, err
	}
	out := map[string]postgres.PartitionInfo{}
	for _, p := range parts {
		out[p.Name] = p
	}
	return out, nil
}

// retiredDay gives a daily-partitioned outbox a partition of a day ten
// days ago holding published events and dead letters of that day, which
// retention at 7 days drops (moving the dead letters), and drops the
// newest partition ahead of both tables, which retention creates again.
// It returns the retired partition's name and the two dropped ones.
func retiredDay(t *testing.T, o outbox, published, dead int) (retired string, removed []string) {
	t.Helper()
	var day time.Time
	if err := o.pool.QueryRow(ctxT(t), `SELECT date_trunc('day', now() - interval '10 days', 'UTC')`).Scan(&day); err != nil {
		t.Fatal(err)
	}
	// Written first, they go to the default partition; creating their
	// day's partition moves them into it.
	at := day.Add(time.Hour)
	for i := 0; i < published; i++ {
		o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, created_at, published_at) VALUES (gen_random_uuid(), 'old.published', '{}', $1, now() - interval '8 days')`, at)
	}
	for i := 0; i < dead; i++ {
		o.exec(t, `INSERT INTO `+o.table()+` (id, event_type, payload, created_at, dead_at, last_error) VALUES (gen_random_uuid(), 'old.dead', '{}', $1, now() - interval '9 days', 'poison')`, at)
	}
	created, err := o.partitions(t).Create(ctxT(t), day, day.Add(24*time.Hour))
	if err != nil || len(created) != 2 {
		t.Fatalf("create the partitions of %s: %v, %v", day, created, err)
	}
	retired = postgres.PartitionDaily.PartitionName("outbox_events", day)
	if n := countIn(t, o, retired); n != published+dead {
		t.Fatalf("%d rows in %s, want %d", n, retired, published+dead)
	}
	// The newest period partition of each table.
	newest := map[string]postgres.PartitionInfo{}
	for _, p := range o.partitionNames(t) {
		if !p.Default && p.To.After(newest[p.Table].To) {
			newest[p.Table] = p
		}
	}
	for _, p := range newest {
		o.exec(t, fmt.Sprintf(`DROP TABLE %q.%q`, o.schema, p.Name))
		removed = append(removed, p.Name)
	}
	if len(removed) != 2 {
		t.Fatalf("newest partitions %v, want one per table", newest)
	}
	return retired, removed
}

// settledToday writes n events into today's partition and settles them,
// as a relay would, leaving n dead rows there for the leader's VACUUM;
// autovacuum is kept off the partition so that only that VACUUM removes
// them.
func settledToday(t *testing.T, o outbox, n int) {
	t.Helper()
	var day time.Time
	if err := o.pool.QueryRow(ctxT(t), `SELECT now()`).Scan(&day); err != nil {
		t.Fatal(err)
	}
	o.exec(t, fmt.Sprintf(`ALTER TABLE %q.%q SET (autovacuum_enabled = false)`, o.schema, postgres.PartitionDaily.PartitionName("outbox_events", day)))
	o.exec(t, `INSERT INTO `+o.table()+` (event_type, payload) SELECT 'settled.today', '{}' FROM generate_series(1, $1)`, n)
	o.exec(t, `UPDATE `+o.table()+` SET published_at = now() WHERE event_type = 'settled.today'`)
}

func countIn(t *testing.T, o outbox, partition string) int {
	t.Helper()
	var n int
	if err := o.pool.QueryRow(ctxT(t), fmt.Sprintf(`SELECT count(*) FROM %q.%q`, o.schema, partition)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRelayServiceRetentionPartitions: on a daily-partitioned outbox the
// relay's retention leader creates the partitions ahead that are missing
// and drops the retired one, moving its dead letters, and /metrics says
// so: outboxctl_retention_partitions_created_total,
// _partitions_dropped_total and _dead_letters_moved_total per tenant, and
// outboxctl_partitions_ahead_seconds between 2 and 3 days (2 days ahead,
// the default). Between its passes the leader vacuums today's partition,
// which settled events left dead rows in, and counts it in
// outboxctl_retention_vacuums_total, and the time it took in
// outboxctl_retention_vacuum_time_seconds_total.
func TestRelayServiceRetentionPartitions(t *testing.T) {
	t.Parallel()
	o := newPartitionedOutbox(t, postgres.PartitionDaily)
	q := newDevQStash(t, nil)
	const published, dead = 4, 2
	today := time.Now().UTC().Truncate(24 * time.Hour)
	retired, removed := retiredDay(t, o, published, dead)
	settledToday(t, o, 1500)

	p := start(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll", "--retention-interval", "200ms", "--vacuum-interval", "100ms")...)
	base := httpAddr(t, p)
	waitFor(t, 30*time.Second, "the retired partition dropped and the removed ones created again", func() bool {
		if p.exited() {
			t.Fatalf("relay exited early (code %d):\n%s", p.code, p.stderr)
		}
		parts, err := o.listPartitions(t)
		if err != nil {
			t.Logf("list the partitions while retention changes them: %v", err)
			return false
		}
		_, kept := parts[retired]
		_, a := parts[removed[0]]
		_, b := parts[removed[1]]
		return !kept && a && b
	})
	if n := o.count(t, "dead_at IS NOT NULL"); n != dead {
		t.Errorf("%d dead letters after the drop, want the %d moved", n, dead)
	}
	if n := countIn(t, o, "outbox_events_default"); n != dead {
		t.Errorf("%d rows in the default partition, want the %d dead letters moved there", n, dead)
	}
	if n := o.count(t, "event_type = 'old.published'"); n != 0 {
		t.Errorf("%d old published events left", n)
	}

	// Two created (one per table), more only if a day began meanwhile.
	wantCreated := 2.0
	if !time.Now().UTC().Truncate(24 * time.Hour).Equal(today) {
		wantCreated = 4
	}
	var got map[string]float64
	waitFor(t, 15*time.Second, "the partition metrics", func() bool {
		m := scrape(t, base)
		got = map[string]float64{}
		for _, name := range []string{"outboxctl_retention_partitions_created_total", "outboxctl_retention_partitions_dropped_total",
			"outboxctl_retention_dead_letters_moved_total", "outboxctl_partitions_ahead_seconds", "outboxctl_retention_leader",
			"outboxctl_retention_vacuums_total", "outboxctl_retention_vacuum_time_seconds_total"} {
			if v, ok := metricSum(m, name, tenantLabels(o.schema)); ok {
				got[name] = v
			}
		}
		ahead, ok := got["outboxctl_partitions_ahead_seconds"]
		return ok && got["outboxctl_retention_leader"] == 1 &&
			got["outboxctl_retention_vacuums_total"] >= 1 && got["outboxctl_retention_vacuum_time_seconds_total"] > 0 &&
			got["outboxctl_retention_partitions_created_total"] == wantCreated &&
			got["outboxctl_retention_partitions_dropped_total"] == 1 &&
			got["outboxctl_retention_dead_letters_moved_total"] == dead &&
			ahead > 2*86400 && ahead <= 3*86400
	})
	t.Logf("metrics: %v", got)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d:\n%s", code, p.stderr)
	}
}

// TestRelayServicePartitionMetricsPlain: on the plain layout the relay
// serves no partition metrics (they would stay 0), though its retention
// runs.
func TestRelayServicePartitionMetricsPlain(t *testing.T) {
	t.Parallel()
	o := newOutbox(t)
	q := newDevQStash(t, nil)
	p := start(t, qstashEnv(), q.relayArgs(o, "--wakeup", "poll", "--retention-interval", "200ms")...)
	base := httpAddr(t, p)
	waitFor(t, 30*time.Second, "the relay ready and a retention pass", func() bool {
		code, _ := readyz(t, base)
		_, passed := metricSum(scrape(t, base), "outboxctl_retention_last_pass_timestamp_seconds", tenantLabels(o.schema))
		return code == http.StatusOK && passed
	})
	// The tenant listed its partitions before its relay started, so the
	// layout is known once it is ready.
	m := scrape(t, base)
	for _, name := range []string{"outboxctl_retention_partitions_created_total", "outboxctl_retention_partitions_dropped_total",
		"outboxctl_retention_dead_letters_moved_total", "outboxctl_partitions_ahead_seconds", "outboxctl_retention_vacuums_total",
		"outboxctl_retention_vacuum_time_seconds_total"} {
		if _, ok := metricSum(m, name, nil); ok {
			t.Errorf("a relay on the plain layout serves %s", name)
		}
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exited %d:\n%s", code, p.stderr)
	}
}
