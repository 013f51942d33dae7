package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// pdb is a test database with a partitioned outbox.
type pdb struct {
	testDB
	parts *postgres.Partitions
}

func newPartitionedDB(t *testing.T, layout postgres.Partitioning) pdb {
	t.Helper()
	pool := pgtest.Pool(t, 6)
	schema := pgtest.Schema(t, pool, "pgpart")
	if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schema, Partitions: layout}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	p, err := postgres.NewPartitions(pool, &postgres.PartitionsConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return pdb{testDB: testDB{pool: pool, schema: schema}, parts: p}
}

func (d pdb) exec(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	tag, err := d.pool.Exec(ctxT(t), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

func (d pdb) table(name string) string { return pgx.Identifier{d.schema, name}.Sanitize() }

// regclass is a table's name as regclass prints it (schema names here
// need no quotes).
func (d pdb) regclass(name string) string { return d.schema + "." + name }

// partitionOf is the partition holding the event with the given ID.
func (d pdb) partitionOf(t *testing.T, id core.ID) string {
	t.Helper()
	var name string
	if err := d.pool.QueryRow(ctxT(t), `SELECT tableoid::regclass::text FROM `+d.table("outbox_events")+` WHERE id = $1`, id).Scan(&name); err != nil {
		t.Fatalf("partition of %s: %v", id, err)
	}
	return name
}

func (d pdb) partitionNames(t *testing.T) map[string]bool {
	t.Helper()
	ps, err := d.parts.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range ps {
		out[p.Name] = true
	}
	return out
}

// A row address is unique within a partition only: the claim must lease
// the rows it locked and no row of another partition at the same address,
// and the settlement by address must touch only the lease's rows.
func TestPartitionedClaimKeepsToTheRowsItLocked(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	day1, day2 := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2030, 3, 2, 0, 0, 0, 0, time.UTC)
	if _, err := d.parts.Create(ctx, day1, day2.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Day 1: published events; day 2: pending ones. Both partitions fill
	// from their first page, so their rows share addresses.
	d.exec(t, `INSERT INTO `+d.table("outbox_events")+` (event_type, payload, created_at, published_at)
SELECT 'old', '{}', $1::timestamptz + g * interval '1 second', now() FROM generate_series(1, 20) g`, day1)
	var due []core.Event
	for i := range 20 {
		e := mustEvent(t, "due", map[string]int{"i": i})
		e.CreatedAt = day2.Add(time.Duration(i) * time.Second)
		e.AvailableAt = time.Now().Add(-time.Minute)
		due = append(due, e)
	}
	s := newStore(t, d.testDB, postgres.Config{})
	if err := addTx(ctx, s, d.pool, due...); err != nil {
		t.Fatal(err)
	}
	var shared int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+d.table("outbox_events_p20300301")+` a JOIN `+d.table("outbox_events_p20300302")+` b ON a.ctid = b.ctid`).Scan(&shared); err != nil {
		t.Fatal(err)
	}
	if shared != 20 {
		t.Fatalf("%d rows of the two partitions share an address, want 20: the test needs them to", shared)
	}
	for _, slot := range []bool{false, true} {
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !s.PartitionedForTest() {
			t.Fatal("the store does not run the partitioned layout's statements")
		}
		if len(b.Events) != 10 {
			t.Fatalf("claimed %d events, want 10", len(b.Events))
		}
		outcomes := make([]core.Outcome, len(b.Events))
		for i, e := range b.Events {
			if e.Type != "due" {
				t.Fatalf("claimed event %s of type %q: a row the claim did not lock (slot claim %v)", e.ID, e.Type, slot)
			}
			outcomes[i] = core.Outcome{ID: e.ID, Kind: core.Published}
			if i%3 == 0 {
				outcomes[i] = core.Outcome{ID: e.ID, Kind: core.Retry, Delay: time.Hour, Error: "later"}
			}
		}
		if n := count(t, d.testDB, `event_type = 'old' AND (lease_token IS NOT NULL OR attempts <> 0)`); n != 0 {
			t.Fatalf("%d published rows of the other partition were leased by the claim", n)
		}
		if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: outcomes}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, d.testDB, `event_type = 'old' AND published_at IS NOT NULL AND lease_token IS NULL AND attempts = 0 AND last_error IS NULL`); n != 20 {
		t.Fatalf("%d of the 20 published rows are as they were", n)
	}
	if n := count(t, d.testDB, `event_type = 'due' AND published_at IS NOT NULL`); n != 12 {
		t.Fatalf("%d due events published, want 12", n)
	}
	if n := count(t, d.testDB, `event_type = 'due' AND last_error = 'later' AND published_at IS NULL AND lease_token IS NULL`); n != 8 {
		t.Fatalf("%d due events retrying, want 8", n)
	}
}

// A settlement of a lease whose rows were all created in the current
// period names that period's partition (oneSettles); a row a foreign
// writer moved to another partition while it was leased (by changing its
// created_at) is not at its address there, and is settled by ID.
func TestPartitionedSettlementFindsAMovedRow(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	now := dbNow(t, d.pool)
	yesterday := now.UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	if _, err := d.parts.Create(ctx, yesterday, now); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, d.testDB, postgres.Config{})
	var due []core.Event
	for i := range 10 {
		due = append(due, mustEvent(t, "due", map[string]int{"i": i}))
	}
	if err := addTx(ctx, s, d.pool, due...); err != nil {
		t.Fatal(err)
	}
	b, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 10 {
		t.Fatalf("claimed %d events, want 10", len(b.Events))
	}
	moved := b.Events[3].ID
	before := d.partitionOf(t, moved)
	d.exec(t, `UPDATE `+d.table("outbox_events")+` SET created_at = $2 WHERE id = $1`, moved, yesterday.Add(time.Hour))
	if after := d.partitionOf(t, moved); after == before {
		t.Fatalf("the row stayed in %s: the test needs it moved", after)
	}
	if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: allPublished(b)}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, d.testDB, `event_type = 'due' AND published_at IS NOT NULL AND lease_token IS NULL`); n != 10 {
		t.Fatalf("%d of the 10 events published, want all (the moved one by ID)", n)
	}
}

// A store takes a table converted while it runs for partitioned at its
// next search for the floor from the beginning; until then it may run
// the plain statements, which is what the conversion's cut-over allows.
func TestStoreSeesTheLayout(t *testing.T) {
	t.Parallel()
	plain := newDB(t, 2)
	s := newStore(t, plain, postgres.Config{})
	if _, err := s.Claim(ctxT(t), core.ClaimRequest{Limit: 1, LeaseFor: time.Second}); err != nil {
		t.Fatal(err)
	}
	if s.PartitionedForTest() {
		t.Fatal("a store on a plain table runs the partitioned layout's statements")
	}
	d := newPartitionedDB(t, postgres.PartitionHourly)
	ps := newStore(t, d.testDB, postgres.Config{})
	if !ps.PartitionedForTest() {
		t.Fatal("a store that has not seen its table yet runs the plain layout's statements")
	}
	if _, err := ps.Claim(ctxT(t), core.ClaimRequest{Limit: 1, LeaseFor: time.Second}); err != nil {
		t.Fatal(err)
	}
	if !ps.PartitionedForTest() {
		t.Fatal("a store on a partitioned table runs the plain layout's statements")
	}
}

// Events written with creation times no partition covers land in the
// default partition; creating their period's partition moves them into
// it, and they are relayed as any other.
func TestPartitionCreateMovesRowsOutOfTheDefault(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	day := time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)
	s := newStore(t, d.testDB, postgres.Config{})
	e := mustEvent(t, "future", nil)
	e.CreatedAt, e.AvailableAt = day.Add(time.Hour), time.Now().Add(-time.Minute)
	if err := addTx(ctx, s, d.pool, e); err != nil {
		t.Fatal(err)
	}
	if got := d.partitionOf(t, e.ID); got != d.regclass("outbox_events_default") {
		t.Fatalf("event in %s, want the default partition", got)
	}
	b, err := s.Claim(ctx, core.ClaimRequest{Limit: 5, LeaseFor: time.Minute})
	if err != nil || len(b.Events) != 1 {
		t.Fatalf("claim = %d events, %v", len(b.Events), err)
	}
	created, err := d.parts.Create(ctx, day, day.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != 4 { // two days, two tables
		t.Fatalf("created %v, want two days of both tables", created)
	}
	if got := d.partitionOf(t, e.ID); got != d.regclass("outbox_events_p20310601") {
		t.Fatalf("event in %s after its partition was created, want outbox_events_p20310601", got)
	}
	// The lease follows the row: settled by ID once its address is gone.
	if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: []core.Outcome{{ID: e.ID, Kind: core.Published}}}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, d.testDB, "published_at IS NOT NULL"); n != 1 {
		t.Fatalf("%d events published, want 1", n)
	}
	if again, err := d.parts.Create(ctx, day, day.Add(48*time.Hour)); err != nil || len(again) != 0 {
		t.Fatalf("second Create = %v, %v; want nothing to do", again, err)
	}
}

// An ID is unique within its partition: a second write of an event is
// refused as on the plain layout when both fall in one partition, which
// is the case for a retried Add of one event (its CreatedAt).
func TestPartitionedDuplicateIDs(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	s := newStore(t, d.testDB, postgres.Config{})
	e := mustEvent(t, "once", nil)
	e.CreatedAt = time.Now()
	if err := addTx(ctx, s, d.pool, e); err != nil {
		t.Fatal(err)
	}
	if err := addTx(ctx, s, d.pool, e); !errors.Is(err, postgres.ErrDuplicateEvent) {
		t.Fatalf("second Add of one event = %v, want ErrDuplicateEvent", err)
	}
	// Plain SQL without created_at: both rows take now(), one partition.
	id := core.NewID()
	ins := `INSERT INTO ` + d.table("outbox_events") + ` (id, event_type, payload) VALUES ($1, 'x', '{}')`
	d.exec(t, ins, id)
	if _, err := d.pool.Exec(ctx, ins, id); err == nil {
		t.Fatal("the same ID inserted twice in one period was accepted")
	}
}

// The processed table's key is (consumer, event_id) whatever the layout:
// a redelivery finds the record however long after it comes.
func TestPartitionedDeduperKey(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionHourly)
	ctx := ctxT(t)
	dd, err := postgres.NewDeduper(d.pool, &postgres.DeduperConfig{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	// The old event's day has no partition (the processed table is daily
	// on every partitioned layout, from the migration's day on).
	for _, id := range []core.ID{core.NewID(), core.NewIDAt(time.Now().Add(-3 * 24 * time.Hour)), core.ID(mustUUIDv4(t))} {
		for i, want := range []bool{true, false} {
			applied, err := dd.Once(ctx, core.DedupeKey{Consumer: "c", EventID: id}, func(context.Context) error { return nil })
			if err != nil || applied != want {
				t.Fatalf("event %s delivery %d: applied %v, %v; want %v", id, i+1, applied, err, want)
			}
		}
	}
	var inPeriod int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+d.table("outbox_events_processed")+` WHERE tableoid <> $1::regclass`, d.table("outbox_events_processed_default")).Scan(&inPeriod); err != nil {
		t.Fatal(err)
	}
	if inPeriod != 1 {
		t.Fatalf("%d records in a period's partition, want 1 (the new UUID v7)", inPeriod)
	}
}

func mustUUIDv4(t *testing.T) [16]byte {
	t.Helper()
	var id [16]byte
	if err := pgtest.Pool(t, 1).QueryRow(ctxT(t), `SELECT gen_random_uuid()`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

var _ = fmt.Sprint

// The claim keeps to the periods that may hold pending rows (its
// created_at range, found with each full floor search): from the oldest
// period with a pending row, or the current one, to the end of the
// current period, or of time when a later one holds a pending row; all of
// them while the default partition holds one. A row made pending outside
// the range after the search (an old event replayed, one created in a
// later period) is claimed after the next search.
func TestCreatedFloor(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	var now time.Time
	if err := d.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	today := now.UTC().Truncate(24 * time.Hour)
	if _, err := d.parts.Create(ctx, today.Add(-10*24*time.Hour), today); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, d.testDB, postgres.Config{})
	s.SetFloorFullEveryForTest(time.Hour) // searches only when the test says
	claim := func() []core.Event {
		t.Helper()
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) > 0 {
			outcomes := make([]core.Outcome, len(b.Events))
			for i, e := range b.Events {
				outcomes[i] = core.Outcome{ID: e.ID, Kind: core.Published}
			}
			if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: outcomes}); err != nil {
				t.Fatal(err)
			}
		}
		return b.Events
	}
	insert := func(created time.Time, published bool) core.ID {
		t.Helper()
		id := core.NewID()
		pub := "NULL"
		if published {
			pub = "now()"
		}
		d.exec(t, `INSERT INTO `+d.table("outbox_events")+` (id, event_type, payload, created_at, available_at, published_at)
VALUES ($1, 'x', '{}', $2, now() - interval '1 minute', `+pub+`)`, id, created)
		return id
	}

	// Nothing pending in the past: the current period.
	old := insert(today.Add(-5*24*time.Hour), true)
	if got := claim(); len(got) != 0 {
		t.Fatalf("claimed %d events, want none", len(got))
	}
	if got := s.CreatedFloorForTest(); !got.Equal(today) {
		t.Fatalf("created floor %v, want today's start %v", got, today)
	}
	if got := s.CreatedCeilingForTest(); !got.Equal(today.Add(24 * time.Hour)) {
		t.Fatalf("created ceiling %v, want today's end", got)
	}
	// Pending in a later period (created tomorrow, due now): no ceiling
	// once the next search saw it.
	tomorrow := insert(today.Add(24*time.Hour+time.Hour), false)
	if got := claim(); len(got) != 0 {
		t.Fatalf("claimed %v before the next search; the event created tomorrow lies above the ceiling", got)
	}
	s.SetFloorFullEveryForTest(time.Hour)
	if got := claim(); len(got) != 1 || got[0].ID != tomorrow {
		t.Fatalf("claimed %v after the search, want the event created tomorrow", got)
	}
	if got := s.CreatedCeilingForTest(); !got.IsZero() {
		t.Fatalf("created ceiling %v with a pending row in a later period, want none", got)
	}
	// Pending five days ago, found by the next search.
	pending := insert(today.Add(-5*24*time.Hour+time.Hour), false)
	s.SetFloorFullEveryForTest(time.Hour)
	if got := claim(); len(got) != 1 || got[0].ID != pending {
		t.Fatalf("claimed %v after a search, want the event five days old", got)
	}
	if got := s.CreatedFloorForTest(); !got.Equal(today.Add(-5 * 24 * time.Hour)) {
		t.Fatalf("created floor %v, want the start of its day", got)
	}
	// Settled: the next search moves the floor to today again; then an
	// old event replayed lies below it until the search after.
	s.SetFloorFullEveryForTest(time.Hour)
	claim()
	if got := s.CreatedFloorForTest(); !got.Equal(today) {
		t.Fatalf("created floor %v after the old event was settled, want today's start", got)
	}
	if n, err := s.Replay(ctx, core.ReplayFilter{IDs: []core.ID{old}}); err != nil || n != 1 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	if got := claim(); len(got) != 0 {
		t.Fatalf("claimed %v before the next search; the replayed event lies below the floor", got)
	}
	s.SetFloorFullEveryForTest(time.Hour)
	if got := claim(); len(got) != 1 || got[0].ID != old {
		t.Fatalf("claimed %v after the search, want the replayed event", got)
	}
	// A pending row in the default partition: no floor.
	future := insert(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC), false)
	d.exec(t, `UPDATE `+d.table("outbox_events")+` SET available_at = now() + interval '1 hour' WHERE id = $1`, future)
	s.SetFloorFullEveryForTest(time.Hour)
	claim()
	if got := s.CreatedFloorForTest(); !got.IsZero() {
		t.Fatalf("created floor %v with a pending row in the default partition, want none", got)
	}
}

// The search for the created_at range probes each partition but the
// current period's through its pending index, whatever the partitions'
// statistics say. Statistics taken while a backlog was pending made
// PostgreSQL read a partition whole once the backlog was settled: it
// drops an EXISTS subquery's ORDER BY and LIMIT and planned what was left
// as a sequential scan expecting a pending row on the first pages. And it
// evaluated the current period's probe, which the condition beside it
// was to skip, before that condition.
func TestCreatedFloorProbesByIndex(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	today := dbNow(t, d.pool).UTC().Truncate(24 * time.Hour)
	yesterday := today.Add(-24 * time.Hour)
	if _, err := d.parts.Create(ctx, yesterday.Add(-24*time.Hour), today); err != nil {
		t.Fatal(err)
	}
	ps, err := d.parts.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var prev, cur string
	for _, p := range ps {
		if p.Table != "outbox_events" {
			continue
		}
		switch {
		case p.From.Equal(yesterday):
			prev = p.Name
		case p.From.Equal(today):
			cur = p.Name
		}
	}
	if prev == "" || cur == "" {
		t.Fatalf("no partition for yesterday or today in %+v", ps)
	}
	// A backlog of 20,000 events in each, analyzed while pending, then
	// settled; autovacuum, where it runs, must not refresh the
	// statistics.
	for _, p := range []string{prev, cur} {
		d.exec(t, `ALTER TABLE `+d.table(p)+` SET (autovacuum_enabled = false)`)
	}
	d.exec(t, `INSERT INTO `+d.table("outbox_events")+` (event_type, payload, created_at)
SELECT 'x', '{}', c FROM generate_series(1, 20000) g, LATERAL (VALUES ($1::timestamptz + g * interval '1 second'), (now())) v(c)`, yesterday)
	for _, p := range []string{prev, cur} {
		d.exec(t, `ANALYZE `+d.table(p))
	}
	d.exec(t, `UPDATE `+d.table("outbox_events")+` SET published_at = now() WHERE published_at IS NULL`)

	s := newStore(t, d.testDB, postgres.Config{})
	q, args, err := s.CreatedProbeForTest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := d.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q, args...).Scan(&plan); err != nil {
		t.Fatalf("explain the search: %v", err)
	}
	var root []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &root); err != nil {
		t.Fatal(err)
	}
	probedPrev := false
	root[0].Plan.walk(func(n planNode) {
		if n.ActualLoops == 0 {
			return
		}
		switch n.RelationName {
		case prev:
			probedPrev = true
			if n.NodeType == "Seq Scan" {
				t.Errorf("the search scanned yesterday's partition %s whole", prev)
			}
		case cur:
			t.Errorf("the search probed the current period's partition %s (%s)", cur, n.NodeType)
		}
	})
	if !probedPrev {
		t.Errorf("the search did not probe yesterday's partition %s:\n%s", prev, plan)
	}
}

// The store plans its statements per execution while the current
// period's partition has no statistics, which the retention leader gives
// it once it holds rows (a plan made while it was empty would scan it
// whole as it fills).
func TestPartitionStatisticsEndPlanning(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionHourly)
	ctx := ctxT(t)
	s := newStore(t, d.testDB, postgres.Config{})
	s.SetGrownForTest()
	if _, err := s.Claim(ctx, core.ClaimRequest{Limit: 1, LeaseFor: time.Second}); err != nil {
		t.Fatal(err)
	}
	if !s.PartitionYoungForTest() {
		t.Fatal("the store prepares its statements although the current partition has no statistics")
	}
	rep, err := d.parts.Maintain(ctx, postgres.PartitionMaintenance{})
	if err != nil || len(rep.Analyzed) != 0 {
		t.Fatalf("Maintain on an empty partition: analyzed %v, %v; want nothing (it is empty)", rep.Analyzed, err)
	}
	d.exec(t, `INSERT INTO `+d.table("outbox_events")+` (event_type, payload, published_at) SELECT 'x', '{}', now() FROM generate_series(1, 1500)`)
	waitFor(t, 20*time.Second, "the inserts in pg_stat_user_tables", func() bool {
		rep, err = d.parts.Maintain(ctx, postgres.PartitionMaintenance{})
		if err != nil {
			t.Fatal(err)
		}
		return len(rep.Analyzed) > 0
	})
	s.SetFloorFullEveryForTest(time.Hour) // the next claim searches, and reads the statistics
	if _, err := s.Claim(ctx, core.ClaimRequest{Limit: 1, LeaseFor: time.Second}); err != nil {
		t.Fatal(err)
	}
	if s.PartitionYoungForTest() {
		t.Fatalf("the store still plans per execution after %v was analyzed", rep.Analyzed)
	}
}

// A claim and a settlement on a table of many partitions keep generic
// plans, as on the plain layout: on the partitioned table itself
// PostgreSQL prices a generic plan over every partition and so plans
// every claim and settlement anew (claimOneSQL, oneSettles), which cost
// a third of the claim with 14 partitions.
func TestPartitionedRelayKeepsGenericPlans(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionHourly)
	ctx := ctxT(t)
	// Twelve past hours' partitions, each with published rows, as a
	// table keeping half a day of events has.
	var now time.Time
	if err := d.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if _, err := d.parts.Create(ctx, now.Add(-12*time.Hour), now); err != nil {
		t.Fatal(err)
	}
	outbox := d.table("outbox_events")
	d.exec(t, `INSERT INTO `+outbox+` (event_type, payload, created_at, published_at)
	SELECT 'old', '{}', now() - (i % 12 + 1) * interval '1 hour', now() FROM generate_series(1, 2400) i`)
	d.exec(t, `INSERT INTO `+outbox+` (event_type, payload) SELECT 'new', '{}' FROM generate_series(1, 3000)`)
	d.exec(t, `ANALYZE `+outbox)
	if n := len(d.partitionNames(t)); n < 14 {
		t.Fatalf("%d partitions; the test wants at least 14", n)
	}

	// One connection, so that every claim is prepared and planned there.
	pool := pgtest.Pool(t, 1)
	s := newStore(t, testDB{pool: pool, schema: d.schema}, postgres.Config{})
	s.SetGrownForTest()
	const claims = 20
	for i := 0; i < claims; i++ {
		b, err := s.Claim(ctx, core.ClaimRequest{Limit: 10, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 10 {
			t.Fatalf("claim %d: %d events, want 10", i, len(b.Events))
		}
		for _, e := range b.Events {
			if e.Type != "new" {
				t.Fatalf("claim %d leased a published event %s", i, e.ID)
			}
		}
		if err := s.Settle(ctx, core.SettleRequest{Lease: b.Lease, Outcomes: allPublished(b)}); err != nil {
			t.Fatal(err)
		}
	}
	// Each claim statement (the first claim's, then the slot claim's
	// under the backlog), and the settlement (all published, by
	// address): PostgreSQL makes five custom plans of a statement before
	// it weighs the generic one.
	for what, like := range map[string]string{
		"claim":      "%SET lease_token = CASE%",
		"settlement": "%SET published_at = COALESCE($2::timestamptz, now()), lease_token = NULL%",
	} {
		rows, err := pool.Query(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
	WHERE statement LIKE $1 AND statement NOT LIKE '%pg_prepared_statements%'`, like)
		if err != nil {
			t.Fatal(err)
		}
		var runs int64
		for rows.Next() {
			var generic, custom int64
			if err := rows.Scan(&generic, &custom); err != nil {
				t.Fatal(err)
			}
			runs += generic + custom
			if generic+custom > 5 && custom > 5 {
				t.Errorf("a %s statement was planned anew %d times of %d (its generic plan used %d times): it does not keep its generic plan", what, custom, generic+custom, generic)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if runs < claims {
			t.Fatalf("%d executions of prepared %s statements seen, want %d: they were not prepared on this connection", runs, what, claims)
		}
	}
}

// A partition dropped while Partitions.List reads the catalog is left
// out: its bound prints as NULL then, which failed the listing ("cannot
// scan NULL"), and with it Maintain and the retention leader's pass.
func TestPartitionsListWhileDropping(t *testing.T) {
	t.Parallel()
	d := newPartitionedDB(t, postgres.PartitionDaily)
	ctx := ctxT(t)
	done := pgtest.ChurnPartitions(ctx, t, d.pool, d.schema, "outbox_events", 300)
	lists := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if lists == 0 {
				t.Fatal("no listing ran while partitions were created and dropped")
			}
			return
		default:
		}
		if _, err := d.parts.List(ctx); err != nil {
			t.Fatalf("List while a partition is dropped (after %d listings): %v", lists, err)
		}
		lists++
	}
}
