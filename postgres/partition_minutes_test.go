package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// Periods of minutes (PartitionMinutes): the layout for short retentions.

var validMinutes = []int{1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30}

// Every whole number of minutes that divides an hour is a layout, named
// "<m>m" and read back in the forms a flag takes; any other is refused
// with an error that names the choices. Daily and hourly keep their
// values.
func TestPartitionMinutesConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 1) // ConvertToPartitioned refuses a nil one first
	if postgres.PartitionDaily != 1 || postgres.PartitionHourly != 2 {
		t.Fatalf("daily %d, hourly %d: the named layouts changed their values", postgres.PartitionDaily, postgres.PartitionHourly)
	}
	seen := map[postgres.Partitioning]bool{postgres.PartitionNone: true, postgres.PartitionDaily: true, postgres.PartitionHourly: true}
	for _, m := range validMinutes {
		p := postgres.PartitionMinutes(m)
		if seen[p] {
			t.Fatalf("PartitionMinutes(%d) = %d, a value another layout has", m, p)
		}
		seen[p] = true
		if got, want := p.String(), fmt.Sprintf("%dm", m); got != want {
			t.Errorf("PartitionMinutes(%d).String() = %q, want %q", m, got, want)
		}
		for _, s := range []string{p.String(), fmt.Sprintf("%dmin", m), fmt.Sprintf(" %d Minutes ", m), fmt.Sprintf("%d minute", m), fmt.Sprintf("%d m", m)} {
			if got, err := postgres.ParsePartitioning(s); err != nil || got != p {
				t.Errorf("ParsePartitioning(%q) = %v, %v; want %v", s, got, err, p)
			}
		}
		if _, err := postgres.NewMigrator((*pgxpool.Pool)(nil), &postgres.MigrateConfig{Partitions: p}); err != nil {
			t.Errorf("NewMigrator with %v: %v", p, err)
		}
		ahead := postgres.DefaultPartitionsAhead(p)
		if ahead < 4 || ahead*m < 30 || (ahead > 4 && (ahead-1)*m >= 30) {
			t.Errorf("DefaultPartitionsAhead(%v) = %d, want the fewest periods covering 30 minutes, at least 4", p, ahead)
		}
	}
	for _, p := range []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionDaily, postgres.PartitionHourly} {
		if got, err := postgres.ParsePartitioning(p.String()); err != nil || got != p {
			t.Errorf("ParsePartitioning(%q) = %v, %v", p.String(), got, err)
		}
	}
	for _, m := range []int{0, -5, 7, 25, 45, 60, 90, 1 << 40} {
		p := postgres.PartitionMinutes(m)
		if p == postgres.PartitionNone || p == postgres.PartitionDaily || p == postgres.PartitionHourly {
			t.Fatalf("PartitionMinutes(%d) = %v, a valid layout", m, p)
		}
		_, err := postgres.NewMigrator((*pgxpool.Pool)(nil), &postgres.MigrateConfig{Partitions: p})
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Partitions" || !strings.Contains(err.Error(), "PartitionMinutes(m) with m 1, 2, 3, 4, 5, 6, 10, 12, 15, 20 or 30") {
			t.Errorf("NewMigrator with PartitionMinutes(%d) = %v; want a *core.ConfigError naming the valid minutes", m, err)
		}
		if _, err := postgres.ConvertToPartitioned(ctxT(t), pool, &postgres.MigrateConfig{Partitions: p}); !errors.As(err, &ce) {
			t.Errorf("ConvertToPartitioned with PartitionMinutes(%d) = %v; want a *core.ConfigError", m, err)
		}
	}
	if got := postgres.PartitionMinutes(7).String(); got != "7m" {
		t.Errorf("PartitionMinutes(7).String() = %q, want \"7m\" (errors name it)", got)
	}
	for s, want := range map[string]string{
		"7m":     "divides an hour, 1, 2, 3, 4, 5, 6, 10, 12, 15, 20 or 30",
		"60min":  "(for 60, hourly)",
		"weekly": "use none, daily, hourly or minutes that divide an hour (5m, 5min;",
		"5s":     "is not a layout",
	} {
		_, err := postgres.ParsePartitioning(s)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePartitioning(%q) = %v; want a *core.ConfigError saying %q", s, err, want)
		}
	}
	at := time.Date(2030, 1, 1, 12, 7, 59, 0, time.UTC)
	for p, want := range map[postgres.Partitioning]string{
		postgres.PartitionDaily:       "t_p20300101",
		postgres.PartitionHourly:      "t_p2030010112",
		postgres.PartitionMinutes(5):  "t_p203001011205",
		postgres.PartitionMinutes(1):  "t_p203001011207",
		postgres.PartitionMinutes(30): "t_p203001011200",
	} {
		if got := p.PartitionName("t", at.In(time.FixedZone("east", 5*3600+1800))); got != want {
			t.Errorf("%v.PartitionName(12:07:59 UTC) = %q, want %q", p, got, want)
		}
	}
}

// minuteParts lists one table's finite partitions, oldest first.
func minuteParts(t *testing.T, d pdb, table string) []postgres.PartitionInfo {
	t.Helper()
	ps, err := d.parts.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []postgres.PartitionInfo
	for _, pi := range ps {
		if pi.Table == table && !pi.Default {
			out = append(out, pi)
		}
	}
	return out
}

// A fresh schema migrated with 5-minute periods: the outbox table has
// the current period and DefaultPartitionsAhead more, each 5 minutes on a
// 5-minute boundary of UTC and named after its start, the processed
// table the current day and DefaultPartitionsAhead(PartitionDaily) more
// (its records are kept for days), and rows land in their period's
// partition.
func TestPartitionMinutesMigrate(t *testing.T) {
	t.Parallel()
	p5 := postgres.PartitionMinutes(5)
	var before time.Time
	pool := pgtest.Pool(t, 1)
	if err := pool.QueryRow(ctxT(t), "SELECT now()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	d := newPartitionedDB(t, p5)
	var after time.Time
	if err := d.pool.QueryRow(ctxT(t), "SELECT now()").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if got, err := d.parts.Layout(ctxT(t)); err != nil || got != p5 {
		t.Fatalf("Layout = %v, %v; want 5m", got, err)
	}
	for _, c := range []struct {
		table  string
		layout postgres.Partitioning
		width  time.Duration
		stamp  string
	}{
		{"outbox_events", p5, 5 * time.Minute, "200601021504"},
		{"outbox_events_processed", postgres.PartitionDaily, 24 * time.Hour, "20060102"},
	} {
		parts := minuteParts(t, d, c.table)
		if want := postgres.DefaultPartitionsAhead(c.layout) + 1; len(parts) != want {
			t.Fatalf("%s has %d partitions, want %d: %+v", c.table, len(parts), want, parts)
		}
		first := parts[0].From
		if !first.Equal(before.UTC().Truncate(c.width)) && !first.Equal(after.UTC().Truncate(c.width)) {
			t.Fatalf("%s's first partition starts at %v; the migration ran between %v and %v", c.table, first, before, after)
		}
		for i, pi := range parts {
			lo := first.Add(time.Duration(i) * c.width)
			if !pi.From.Equal(lo) || !pi.To.Equal(lo.Add(c.width)) || pi.Name != c.layout.PartitionName(c.table, lo) {
				t.Errorf("%s partition %d: %s [%v, %v), want %s [%v, %v)", c.table, i, pi.Name, pi.From, pi.To, c.layout.PartitionName(c.table, lo), lo, lo.Add(c.width))
			}
		}
		if want := c.table + "_p" + first.Format(c.stamp); parts[0].Name != want {
			t.Errorf("first partition %s, want %s", parts[0].Name, want)
		}
	}

	// Rows of a backfill's periods, either side of their bounds.
	ctx := ctxT(t)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	created, err := d.parts.Create(ctx, t0, t0.Add(15*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"outbox_events_p203001011200", "outbox_events_p203001011205", "outbox_events_p203001011210",
		"outbox_events_processed_p20300101"}; !slices.Equal(created, want) {
		t.Fatalf("Create over 15 minutes created %v, want %v", created, want)
	}
	for at, want := range map[time.Time]string{
		t0.Add(5*time.Minute - time.Microsecond): "outbox_events_p203001011200",
		t0.Add(5 * time.Minute):                  "outbox_events_p203001011205",
		t0.Add(14*time.Minute + 59*time.Second):  "outbox_events_p203001011210",
		t0.Add(15 * time.Minute):                 "outbox_events_default",
	} {
		id := core.NewID()
		d.exec(t, `INSERT INTO `+d.table("outbox_events")+` (id, event_type, payload, created_at) VALUES ($1, 'x', '{}', $2)`, id, at)
		if got := d.partitionOf(t, id); got != d.regclass(want) {
			t.Errorf("event created at %v in %s, want %s", at, got, want)
		}
	}
	// created_at left to now(): the current period's partition.
	id := core.NewID()
	var now time.Time
	if err := d.pool.QueryRow(ctx, `INSERT INTO `+d.table("outbox_events")+` (id, event_type, payload) VALUES ($1, 'x', '{}') RETURNING created_at`, id).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if got, want := d.partitionOf(t, id), d.regclass(p5.PartitionName("outbox_events", now)); got != want {
		t.Errorf("event created now in %s, want %s", got, want)
	}
	dd, err := postgres.NewDeduper(d.pool, &postgres.DeduperConfig{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	for at, want := range map[time.Time]string{
		t0.Add(7 * time.Minute):               "outbox_events_processed_p20300101",
		t0.Add(11*time.Hour + 59*time.Minute): "outbox_events_processed_p20300101",
		t0.Add(12 * time.Hour):                "outbox_events_processed_default",
		now:                                   postgres.PartitionDaily.PartitionName("outbox_events_processed", now),
	} {
		eid := core.NewIDAt(at)
		if _, err := dd.Once(ctx, core.DedupeKey{Consumer: "c", EventID: eid}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := d.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+d.table("outbox_events_processed")+` WHERE event_id = $1`, eid).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != d.regclass(want) {
			t.Errorf("record of an event created at %v in %s, want %s", at, got, d.regclass(want))
		}
	}
}

// Maintain on 5-minute periods creates the missing periods ahead and
// drops the partitions whose period ended before the horizon and whose
// events were all published before it, and keeps the rest.
func TestPartitionMinutesMaintain(t *testing.T) {
	t.Parallel()
	p5 := postgres.PartitionMinutes(5)
	d := newPartitionedDB(t, p5)
	ctx := ctxT(t)
	var now time.Time
	if err := d.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	// Half an hour of past periods, each with an event published 25
	// minutes ago (kept by a horizon further back, dropped by one after).
	if _, err := d.parts.Create(ctx, now.Add(-30*time.Minute), now); err != nil {
		t.Fatal(err)
	}
	for ago := 30; ago >= 5; ago -= 5 {
		d.exec(t, `INSERT INTO `+d.table("outbox_events")+` (event_type, payload, created_at, published_at)
VALUES ('x', '{}', $1, now() - interval '25 minutes')`, now.Add(-time.Duration(ago)*time.Minute))
	}
	// One the retention leader missed.
	gone := p5.PartitionName("outbox_events", now.Add(time.Duration(postgres.DefaultPartitionsAhead(p5))*5*time.Minute))
	d.exec(t, "DROP TABLE IF EXISTS "+d.table(gone)) // absent if the migration ran in the period before now's

	rep, err := d.parts.Maintain(ctx, postgres.PartitionMaintenance{PublishedBefore: now.Add(-26 * time.Minute), ProcessedBefore: now.Add(-10 * time.Minute)})
	if err != nil || rep.Failed != 0 {
		t.Fatalf("Maintain = %+v, %v", rep, err)
	}
	if rep.Outbox != p5 || rep.Processed != postgres.PartitionDaily {
		t.Fatalf("Maintain saw layouts %v and %v, want 5m and daily", rep.Outbox, rep.Processed)
	}
	// (With the processed table's too, should the migration have run in
	// the period before now's, and the next period's, should now's have
	// ended since.)
	if !slices.Contains(rep.Created, gone) || len(rep.Created) > 3 {
		t.Fatalf("Maintain created %v, want the missing %s", rep.Created, gone)
	}
	var outboxDropped []string
	for _, name := range rep.Dropped {
		if !strings.HasPrefix(name, "outbox_events_processed") {
			outboxDropped = append(outboxDropped, name)
		}
	}
	if len(outboxDropped) != 0 {
		t.Fatalf("Maintain dropped %v; their events were published after the horizon", outboxDropped)
	}
	// The processed table's partitions are days: today's has not ended
	// before its horizon (TestPartitionMinutesProcessedDaily drops past
	// days').
	if today := postgres.PartitionDaily.PartitionName("outbox_events_processed", now); slices.Contains(rep.Dropped, today) {
		t.Errorf("Maintain dropped today's processed partition %s: %v", today, rep.Dropped)
	}

	// A horizon past the publications: the periods ended before it go,
	// the one it falls in and the current one stay.
	horizon := now.Add(-12 * time.Minute)
	rep, err = d.parts.Maintain(ctx, postgres.PartitionMaintenance{PublishedBefore: horizon})
	if err != nil || rep.Failed != 0 {
		t.Fatalf("Maintain = %+v, %v", rep, err)
	}
	names := d.partitionNames(t)
	for ago := 30; ago >= 0; ago -= 5 {
		lo := p5.PartitionName("outbox_events", now.Add(-time.Duration(ago)*time.Minute))
		end := now.Add(-time.Duration(ago) * time.Minute).UTC().Truncate(5 * time.Minute).Add(5 * time.Minute)
		if wantGone := !end.After(horizon); wantGone != slices.Contains(rep.Dropped, lo) || wantGone == names[lo] {
			t.Errorf("partition %s (ends %v, horizon %v): dropped %v, exists %v", lo, end, horizon, slices.Contains(rep.Dropped, lo), names[lo])
		}
	}
	if n := count(t, d.testDB, "true"); n > 3 || n < 2 {
		t.Errorf("%d events left, want those of the periods not retired (2 or 3)", n)
	}
}

// On 5-minute periods the processed table goes by days: Create and
// Maintain create its partitions a day wide while the outbox table's are
// 5 minutes, Ahead counts outbox periods (an hour of them does not keep
// 12 days of processed partitions), a consumer's record lands in its
// event's day, and the retention leader drops a retired day of records
// as it drops retired 5-minute periods of events.
func TestPartitionMinutesProcessedDaily(t *testing.T) {
	t.Parallel()
	p5, daily := postgres.PartitionMinutes(5), postgres.PartitionDaily
	d := newPartitionedDB(t, p5)
	ctx := ctxT(t)
	var now time.Time
	if err := d.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	const processed = "outbox_events_processed"
	today := now.UTC().Truncate(24 * time.Hour)

	// Ten minutes three days ago: two periods of events, one day of
	// records.
	past := today.Add(-3*24*time.Hour + 12*time.Hour)
	created, err := d.parts.Create(ctx, past, past.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	pastDay := daily.PartitionName(processed, past)
	if want := []string{p5.PartitionName("outbox_events", past), p5.PartitionName("outbox_events", past.Add(5*time.Minute)), pastDay}; !slices.Equal(created, want) {
		t.Fatalf("Create over 10 minutes created %v, want %v", created, want)
	}

	// A consumer's records: each in its event's day.
	dd, err := postgres.NewDeduper(d.pool, &postgres.DeduperConfig{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	old := core.NewIDAt(past.Add(7 * time.Hour))
	for _, c := range []struct {
		id   core.ID
		want string
	}{
		{old, pastDay},
		{core.NewIDAt(now), daily.PartitionName(processed, now)},
		{core.NewIDAt(today.Add(24*time.Hour + 23*time.Hour)), daily.PartitionName(processed, today.Add(24*time.Hour))},
	} {
		if applied, err := dd.Once(ctx, core.DedupeKey{Consumer: "c", EventID: c.id}, func(context.Context) error { return nil }); err != nil || !applied {
			t.Fatalf("Once = %v, %v", applied, err)
		}
		var got string
		if err := d.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+d.table(processed)+` WHERE event_id = $1`, c.id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != d.regclass(c.want) {
			t.Errorf("record of an event created at %v in %s, want %s", c.id.Time(), got, d.regclass(c.want))
		}
	}

	// The last day ahead and the last 5-minute period ahead went
	// missing; Maintain, an hour of periods ahead, brings both back, each
	// table in its own period.
	lastDay := daily.PartitionName(processed, today.Add(time.Duration(postgres.DefaultPartitionsAhead(daily))*24*time.Hour))
	lastPeriod := p5.PartitionName("outbox_events", now.Add(time.Duration(postgres.DefaultPartitionsAhead(p5))*5*time.Minute))
	d.exec(t, "DROP TABLE "+d.table(lastDay))
	d.exec(t, "DROP TABLE IF EXISTS "+d.table(lastPeriod)) // absent if the migration ran in the period before now's
	parts, err := postgres.NewPartitions(d.pool, &postgres.PartitionsConfig{Schema: d.schema, Ahead: 12})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := parts.Maintain(ctx, postgres.PartitionMaintenance{})
	if err != nil || rep.Failed != 0 {
		t.Fatalf("Maintain = %+v, %v", rep, err)
	}
	if rep.Outbox != p5 || rep.Processed != daily {
		t.Fatalf("Maintain saw layouts %v and %v, want 5m and daily", rep.Outbox, rep.Processed)
	}
	if !slices.Contains(rep.Created, lastDay) || !slices.Contains(rep.Created, lastPeriod) {
		t.Fatalf("Maintain created %v, want %s and %s among them", rep.Created, lastDay, lastPeriod)
	}
	lists := map[string][]postgres.PartitionInfo{}
	for _, table := range []string{"outbox_events", processed} {
		lists[table] = minuteParts(t, d, table)
	}
	for _, pi := range lists[processed] {
		if pi.To.Sub(pi.From) != 24*time.Hour || !pi.From.Equal(pi.From.Truncate(24*time.Hour)) || pi.Name != daily.PartitionName(processed, pi.From) {
			t.Errorf("processed partition %s [%v, %v), want a day's", pi.Name, pi.From, pi.To)
		}
	}
	if last := lists[processed][len(lists[processed])-1]; last.To.After(today.Add(time.Duration(postgres.DefaultPartitionsAhead(daily)+2) * 24 * time.Hour)) {
		t.Errorf("processed partitions reach %v: Ahead's hour of 5-minute periods kept %s", last.To, last.Name)
	}
	for _, pi := range lists["outbox_events"] {
		if pi.To.Sub(pi.From) != 5*time.Minute {
			t.Errorf("outbox partition %s [%v, %v), want 5 minutes", pi.Name, pi.From, pi.To)
		}
	}
	if last := lists["outbox_events"][len(lists["outbox_events"])-1]; last.To.Before(now.Add(12 * 5 * time.Minute)) {
		t.Errorf("outbox partitions end at %v, want 12 periods after now's (%v)", last.To, now)
	}

	// The retention leader: the past day's record was processed three
	// days ago, past RetainProcessed; the past periods hold no event.
	d.exec(t, `UPDATE `+d.table(processed)+` SET processed_at = now() - interval '3 days' WHERE event_id = $1`, old)
	r, err := postgres.NewRetention(d.pool, &postgres.RetentionConfig{Schema: d.schema, Holder: "daily", RetainPublished: 10 * time.Minute, RetainProcessed: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range created {
		if !slices.Contains(res.Partitions.Dropped, name) {
			t.Errorf("retention dropped %v, without the retired %s", res.Partitions.Dropped, name)
		}
	}
	for _, name := range res.Partitions.Dropped {
		if strings.HasPrefix(name, processed) && name != pastDay {
			t.Errorf("retention dropped %s, a day not retired", name)
		}
	}
	var left int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+d.table(processed)).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 2 || res.ProcessedDeleted != 0 {
		t.Errorf("%d records left, %d deleted one by one; want the 2 of today and tomorrow, the old one gone with its day", left, res.ProcessedDeleted)
	}
}

// A plain table converted to 5-minute periods: the cut-over is the first
// 5-minute boundary at least ConvertCutOverMargin away, the periods from
// it are created, and rows after it go to their period.
func TestPartitionMinutesConvert(t *testing.T) {
	t.Parallel()
	plain := newDB(t, 2)
	d := pdb{testDB: plain}
	ctx := ctxT(t)
	var before time.Time
	if err := d.pool.QueryRow(ctx, "SELECT now()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	p5 := postgres.PartitionMinutes(5)
	rep, err := postgres.ConvertToPartitioned(ctx, d.pool, &postgres.MigrateConfig{Schema: d.schema, Partitions: p5})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.CutOver.Equal(rep.CutOver.Truncate(5*time.Minute)) || rep.CutOver.Before(before.Add(postgres.ConvertCutOverMargin)) ||
		!rep.CutOver.Before(before.Add(postgres.ConvertCutOverMargin+5*time.Minute+time.Minute)) {
		t.Fatalf("cut-over %v, want the first 5-minute boundary 10 minutes after %v", rep.CutOver, before)
	}
	for i := range postgres.DefaultPartitionsAhead(p5) + 1 {
		if name := p5.PartitionName("outbox_events", rep.CutOver.Add(time.Duration(i)*5*time.Minute)); !slices.Contains(rep.Created, name) {
			t.Errorf("conversion created %v, without %s", rep.Created, name)
		}
	}
	parts, err := postgres.NewPartitions(d.pool, &postgres.PartitionsConfig{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := parts.Layout(ctx); err != nil || got != p5 {
		t.Fatalf("Layout after the conversion = %v, %v; want 5m", got, err)
	}
	id := core.NewID()
	at := rep.CutOver.Add(7 * time.Minute)
	d.exec(t, `INSERT INTO `+d.table("outbox_events")+` (id, event_type, payload, created_at) VALUES ($1, 'x', '{}', $2)`, id, at)
	if got, want := d.partitionOf(t, id), d.regclass(p5.PartitionName("outbox_events", at)); got != want {
		t.Errorf("event created at %v in %s, want %s", at, got, want)
	}
}
