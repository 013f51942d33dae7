package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The partitions workload (the partitioned layout, docs/SCHEMA.md): on the
// plain layout and on daily partitions, side by side in one run,
//
//   - retained: does history cost a relay anything? The drain (-events,
//     each batch size of -batches) and the latency run (-partition-rate,
//     NotifyAfterCommit, -latency-duration) on an empty table and on one
//     keeping -partition-retained published rows created over the last
//     -partition-days days (written published by INSERT ... SELECT,
//     -partition-days statements, then VACUUM ANALYZE and CHECKPOINT).
//     Each layout's kept table is seeded once and shared by its trials
//     (each drains a fresh backlog into it, so it grows by -events per
//     trial); the empty tables are new for every trial. Every trial on a
//     kept table is followed by a VACUUM (ANALYZE) of it (not timed), so
//     that each retained trial starts, like each empty one, with no dead
//     rows and with statistics that describe the table as it is:
//     otherwise, with autovacuum off, the kept table would carry every
//     earlier trial's settled versions and dead pending-index entries
//     (up to 600,000 of them by the last repetition), which the claims'
//     floor searches walk, and the statistics of the last drain's ANALYZE,
//     taken with its backlog pending, which cost the retained table's
//     latency 8-39 % (docs/BENCHMARKS.md, runs 4-7; likely a custom plan
//     of every claim, as PostgreSQL estimates many due rows, where the
//     empty table keeps one plan); the ratio would measure earlier trials,
//     not the rows retained. What dead rows cost is the growth workload's
//     question (growth.go), and the soak's.
//   - retire: one day of -partition-retire published rows (and 100 dead
//     letters) eight days old, retired with the default retention of 7
//     days: by batched DELETE on the plain layout (Store.Prune, batches of
//     1,000, without Retention's pause between them), by dropping the day's
//     partition on the partitioned one (Partitions.Maintain, what a
//     Retention pass runs). The dead rows each leaves are read from
//     pg_stat_user_tables.

// Systems of the workload: the two layouts.
const (
	sysPlain = "plain table"
	sysDaily = "daily partitions"
)

func layoutSys(p postgres.Partitioning) string {
	if p == postgres.PartitionNone {
		return sysPlain
	}
	return sysDaily
}

var benchLayouts = []postgres.Partitioning{postgres.PartitionNone, postgres.PartitionDaily}

const (
	stateEmpty    = "empty"
	stateRetained = "retained"
)

func (b *bench) partitionCase(what, state string) string {
	if state == stateEmpty {
		return what + " empty"
	}
	return what + " retained=" + groupThousands(strconv.Itoa(b.o.partRetained))
}

func (b *bench) runPartitions(ctx context.Context) error {
	o := b.o
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("partitions workload: retained rows (%d, created over %d days) written published by INSERT ... SELECT in one statement per day, then VACUUM ANALYZE and CHECKPOINT; "+
		"each layout's kept table seeded once and shared by its trials (each drains a fresh backlog of %d into it), and VACUUM (ANALYZE)d after each of them (not timed), so every retained trial, like every empty one, starts with no dead rows and with statistics of the table as it is; drains as the growth workload's (NotifyOff, 10 ms poll, pool of 3); "+
		"latency as the latency workload's NotifyAfterCommit case at %d/s; retire: one day of %d published rows and 100 dead letters, 8 days old, default retention (7 days)",
		o.partRetained, o.partDays, o.events, o.partRate, o.partRetire))
	kept := map[postgres.Partitioning]*schema{}
	for _, layout := range benchLayouts {
		t0 := time.Now()
		s, err := b.layoutSchema(ctx, layout)
		if err != nil {
			return err
		}
		defer s.drop()
		if err := b.seedRetained(ctx, s, layout); err != nil {
			return err
		}
		b.logf("partitions: seeded %s with %d published rows in %.0f s", layoutSys(layout), o.partRetained, time.Since(t0).Seconds())
		kept[layout] = s
	}
	skip := func(phase string) bool { return slices.Contains(o.partSkip, phase) }
	for rep := 0; rep < o.reps; rep++ {
		for _, batch := range o.batches {
			if skip("drain") {
				break
			}
			for _, layout := range rotate(benchLayouts, rep) {
				for _, state := range rotate([]string{stateEmpty, stateRetained}, rep) {
					cas := b.partitionCase(fmt.Sprintf("drain batch=%d", batch), state)
					res, err := attempt(ctx, b, fmt.Sprintf("partitions %s %s rep %d", cas, layoutSys(layout), rep+1), func() (drainResult, error) {
						s := kept[layout]
						if state == stateEmpty {
							var err error
							if s, err = b.layoutSchema(ctx, layout); err != nil {
								return drainResult{}, err
							}
							defer s.drop()
						}
						res, err := b.partitionDrain(ctx, s, batch)
						if err == nil && state == stateRetained {
							err = b.vacuumKept(ctx, s)
						}
						return res, err
					})
					if err != nil {
						return fmt.Errorf("%s %s: %w", cas, layoutSys(layout), err)
					}
					b.logf("partitions %s %s rep %d: %.0f events/s, PG %.1f µs/event", cas, layoutSys(layout), rep+1, res.rate(o.events), res.dbCPU)
					b.rep.add("partitions", cas, layoutSys(layout), "events/s", res.rate(o.events))
					b.rep.add("partitions", cas, layoutSys(layout), "PG CPU µs/event", res.dbCPU)
					res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "partitions", cas, layoutSys(layout), rep+1
					b.rep.check(res.check)
				}
			}
		}
		for _, layout := range rotate(benchLayouts, rep) {
			if skip("latency") {
				break
			}
			for _, state := range rotate([]string{stateEmpty, stateRetained}, rep) {
				cas := b.partitionCase(fmt.Sprintf("latency %d/s", o.partRate), state)
				res, err := attempt(ctx, b, fmt.Sprintf("partitions %s %s rep %d", cas, layoutSys(layout), rep+1), func() (latencyResult, error) {
					s := kept[layout]
					if state == stateEmpty {
						var err error
						if s, err = b.layoutSchema(ctx, layout); err != nil {
							return latencyResult{}, err
						}
						defer s.drop()
					}
					res, err := b.latencyOutboxkit(ctx, o.partRate, latencyVariant{mode: postgres.NotifyAfterCommit, on: s}, "")
					if err == nil && state == stateRetained {
						err = b.vacuumKept(ctx, s)
					}
					return res, err
				})
				if err != nil {
					return fmt.Errorf("%s %s: %w", cas, layoutSys(layout), err)
				}
				b.logf("partitions %s %s rep %d: p50 %.2f ms, p99 %.2f ms", cas, layoutSys(layout), rep+1, ms(res.p50), ms(res.p99))
				b.rep.add("partitions", cas, layoutSys(layout), "p50 ms", ms(res.p50))
				b.rep.add("partitions", cas, layoutSys(layout), "p99 ms", ms(res.p99))
				res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "partitions", cas, layoutSys(layout), rep+1
				b.rep.check(res.check)
			}
		}
		for _, layout := range rotate(benchLayouts, rep) {
			if skip("retire") {
				break
			}
			cas := fmt.Sprintf("retire one day of %s", groupThousands(strconv.Itoa(o.partRetire)))
			res, err := attempt(ctx, b, fmt.Sprintf("partitions %s %s rep %d", cas, layoutSys(layout), rep+1), func() (retireResult, error) {
				return b.retireDay(ctx, layout)
			})
			if err != nil {
				return fmt.Errorf("%s %s: %w", cas, layoutSys(layout), err)
			}
			b.logf("partitions %s %s rep %d: %.3f s, %d dead rows left, %s", cas, layoutSys(layout), rep+1, res.seconds, res.dead, res.check.Detail)
			b.rep.add("partitions", cas, layoutSys(layout), "seconds", res.seconds)
			b.rep.add("partitions", cas, layoutSys(layout), "dead rows left", float64(res.dead))
			res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "partitions", cas, layoutSys(layout), rep+1
			b.rep.check(res.check)
		}
	}
	b.partitionRatios()
	return nil
}

// partitionRatios adds the workload's ratios and targets.
func (b *bench) partitionRatios() {
	r, o := b.rep, b.o
	for _, layout := range benchLayouts {
		sys := layoutSys(layout)
		for _, batch := range o.batches {
			what := fmt.Sprintf("drain batch=%d", batch)
			q := r.ratioOf("partitions", "retained / empty ("+sys+")", "events/s", b.partitionCase(what, stateRetained), sys, b.partitionCase(what, stateEmpty), sys)
			r.target(fmt.Sprintf("partitions: drain batch=%d, %s, retained / empty ≥ 0.95", batch, sys), ratioMedian(q), q != nil, ">=", 0.95, "×")
			// The figure a busy machine moves least.
			r.ratioOf("partitions", "retained / empty ("+sys+"), PG CPU per event", "PG CPU µs/event", b.partitionCase(what, stateRetained), sys, b.partitionCase(what, stateEmpty), sys)
		}
		what := fmt.Sprintf("latency %d/s", o.partRate)
		for _, m := range []string{"p50 ms", "p99 ms"} {
			q := r.ratioOf("partitions", "retained / empty ("+sys+"), "+m, m, b.partitionCase(what, stateRetained), sys, b.partitionCase(what, stateEmpty), sys)
			r.target(fmt.Sprintf("partitions: latency %s, %s, retained / empty ≤ 1.05", m, sys), ratioMedian(q), q != nil, "<=", 1.05, "×")
		}
	}
	for _, batch := range o.batches {
		for _, state := range []string{stateEmpty, stateRetained} {
			cas := b.partitionCase(fmt.Sprintf("drain batch=%d", batch), state)
			r.ratio("partitions", cas, "daily partitions / plain table", "events/s", sysDaily, sysPlain)
		}
	}
	cas := fmt.Sprintf("retire one day of %s", groupThousands(strconv.Itoa(o.partRetire)))
	r.ratio("partitions", cas, "daily partitions / plain table", "seconds", sysDaily, sysPlain)
	s := r.find("partitions", cas, sysDaily, "seconds")
	var v float64
	if s != nil {
		v = s.Median
	}
	r.target("partitions: retire one day, daily partitions ≤ 1 s", v, s != nil, "<=", 1, "s")
}

func ratioMedian(q *Ratio) float64 {
	if q == nil {
		return 0
	}
	return q.Median
}

// layoutSchema is a fresh schema migrated with the layout.
func (b *bench) layoutSchema(ctx context.Context, layout postgres.Partitioning) (*schema, error) {
	s, err := b.createSchema(ctx)
	if err != nil {
		return nil, err
	}
	if err := postgres.Migrate(ctx, b.admin, &postgres.MigrateConfig{Schema: s.name, Partitions: layout}); err != nil {
		_ = s.drop()
		return nil, fmt.Errorf("migrate %s: %w", s.name, err)
	}
	return s, nil
}

// seedRetained writes the kept rows: -partition-retained published rows
// created over the last -partition-days days, oldest first, one statement
// per day, with the days' partitions created first.
func (b *bench) seedRetained(ctx context.Context, s *schema, layout postgres.Partitioning) error {
	o := b.o
	days := max(o.partDays, 1)
	if layout != postgres.PartitionNone {
		p, err := postgres.NewPartitions(s.pool, &postgres.PartitionsConfig{Schema: s.name})
		if err != nil {
			return err
		}
		if _, err := p.Create(ctx, time.Now().Add(-time.Duration(days)*24*time.Hour), time.Now()); err != nil {
			return fmt.Errorf("create the kept days' partitions: %w", err)
		}
	}
	t := s.table(postgres.DefaultTable)
	per := o.partRetained / days
	for d := days; d >= 1; d-- {
		// Day d ago: rows a relay that kept up left, published a
		// millisecond after they were written.
		if _, err := s.pool.Exec(ctx, `INSERT INTO `+t+` (id, event_type, payload, created_at, available_at, published_at, attempts)
SELECT `+uuidV7+`, 'bench', `+growthPayload+`, ts, ts, ts + interval '1 millisecond', 1
FROM (SELECT now() - $2::int * interval '1 day' + g * (interval '1 day' / $1::int) AS ts FROM generate_series(1, $1::int) g) h`, per, d); err != nil {
			return fmt.Errorf("seed %d published rows, %d days ago: %w", per, d, err)
		}
	}
	// What autovacuum's insert threshold does to such a table on a
	// production server: the kept rows' pages all-visible, statistics.
	if _, err := s.pool.Exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, "CHECKPOINT")
	return err
}

// vacuumKept removes the dead rows a trial left in a kept table (its
// backlog's settled versions and their pending-index entries), so the
// next retained trial starts, as an empty one does, with none, and
// analyzes it, as the seeding did: the drain's ANALYZE was taken with its
// backlog pending. Then it checkpoints as the seeding did.
func (b *bench) vacuumKept(ctx context.Context, s *schema) error {
	t0 := time.Now()
	// INDEX_CLEANUP ON: with fewer than 2 % of the table's pages holding
	// dead rows (100,000 events beside 10,000,000), VACUUM would skip the
	// indexes and leave the trial's pending-index entries in place.
	for _, stmt := range []string{"VACUUM (ANALYZE, INDEX_CLEANUP ON) " + s.table(postgres.DefaultTable), "CHECKPOINT"} {
		if _, err := s.pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("after the trial: %s: %w", stmt, err)
		}
	}
	b.logf("partitions: vacuumed the kept table %s in %.1f s", s.name, time.Since(t0).Seconds())
	return nil
}

// partitionDrain preloads a backlog of -events into s (transactions of
// growthChunk rows, then ANALYZE and CHECKPOINT) and times a relay draining
// it, as the growth workload does.
func (b *bench) partitionDrain(ctx context.Context, s *schema, batch int) (drainResult, error) {
	n := b.o.events
	t := s.table(postgres.DefaultTable)
	for left := n; left > 0; left -= growthChunk {
		if _, err := s.pool.Exec(ctx, `INSERT INTO `+t+` (id, event_type, payload)
SELECT `+uuidV7+`, 'bench', `+growthPayload+` FROM generate_series(1, $1::int)`, min(left, growthChunk)); err != nil {
			return drainResult{}, fmt.Errorf("preload backlog: %w", err)
		}
	}
	for _, stmt := range []string{"ANALYZE " + t, "CHECKPOINT"} {
		if _, err := s.pool.Exec(ctx, stmt); err != nil {
			return drainResult{}, err
		}
	}
	pool, err := newPool(ctx, b.o.dsn, 3)
	if err != nil {
		return drainResult{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Schema: s.name, Notify: postgres.NotifyOff})
	if err != nil {
		return drainResult{}, err
	}
	sink := &countSink{}
	ctr := newSettleCounter(n)
	relay, err := core.NewRelay(store, sink, &core.RelayConfig{BatchSize: batch, DisableNotifier: true, PollInterval: 10 * time.Millisecond, Hooks: []core.RelayHook{ctr}})
	if err != nil {
		return drainResult{}, err
	}
	run, err := timeRelay(ctx, relay, ctr, func() (*cpuMeter, error) { return newCPUMeter(ctx, pool) }, n, "")
	if err != nil {
		return drainResult{}, err
	}
	left, err := pendingCount(ctx, s)
	if err != nil {
		return drainResult{}, err
	}
	got := sink.n.Load()
	res := drainResult{seconds: run.elapsed.Seconds(), procCPU: perEvent(run.procCPU, n), dbCPU: perEvent(run.dbCPU, n)}
	res.check = Check{OK: left == 0 && got == int64(n) && ctr.lost.Load() == 0,
		Detail: fmt.Sprintf("sink received %d of %d, %d rows still pending, %d settled under a lost lease", got, n, left, ctr.lost.Load())}
	return res, nil
}

// retireResult is one retirement of a day.
type retireResult struct {
	seconds float64
	dead    int64
	check   Check
}

// retireDay seeds one day, eight days ago, of -partition-retire published
// rows and 100 dead letters in a fresh schema of the layout, and times
// the default retention's horizon (7 days) retiring it.
func (b *bench) retireDay(ctx context.Context, layout postgres.Partitioning) (retireResult, error) {
	n := b.o.partRetire
	s, err := b.layoutSchema(ctx, layout)
	if err != nil {
		return retireResult{}, err
	}
	defer s.drop()
	var now time.Time
	if err := s.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return retireResult{}, err
	}
	day := now.UTC().Truncate(24 * time.Hour).Add(-8 * 24 * time.Hour)
	if layout != postgres.PartitionNone {
		parts, err := postgres.NewPartitions(s.pool, &postgres.PartitionsConfig{Schema: s.name})
		if err != nil {
			return retireResult{}, err
		}
		if _, err := parts.Create(ctx, day, day.Add(time.Hour)); err != nil {
			return retireResult{}, err
		}
	}
	t := s.table(postgres.DefaultTable)
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+t+` (id, event_type, payload, created_at, available_at, published_at, attempts)
SELECT `+uuidV7+`, 'bench', `+growthPayload+`, ts, ts, ts + interval '1 millisecond', 1
FROM (SELECT $2::timestamptz + (g - 1) * (interval '1 day' / $1::int) AS ts FROM generate_series(1, $1::int) g) h`, n, day); err != nil {
		return retireResult{}, fmt.Errorf("seed the day: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+t+` (event_type, payload, created_at, available_at, dead_at, attempts, last_error)
SELECT 'bench', '{}', $1::timestamptz + interval '1 hour', $1::timestamptz, $1::timestamptz + interval '2 hours', 5, 'poison' FROM generate_series(1, 100)`, day); err != nil {
		return retireResult{}, fmt.Errorf("seed dead letters: %w", err)
	}
	for _, stmt := range []string{"ANALYZE " + t, "CHECKPOINT"} {
		if _, err := s.pool.Exec(ctx, stmt); err != nil {
			return retireResult{}, err
		}
	}
	// The retirement runs on connections of its own, closed before the
	// dead rows are read: a backend's statistics reach
	// pg_stat_user_tables when it exits, at the latest.
	op, err := newPool(ctx, b.o.dsn, 2)
	if err != nil {
		return retireResult{}, err
	}
	defer op.Close()
	pids, err := backendPIDs(ctx, op)
	if err != nil {
		return retireResult{}, err
	}
	var res retireResult
	// What a Retention pass of the leader does, without the pause between
	// batches (BatchPause 100 ms by default: 1,000,000 rows would take
	// 100 s of pauses on the plain layout).
	ret, err := postgres.NewRetention(op, &postgres.RetentionConfig{Schema: s.name, Holder: "bench", BatchPause: -1, RetainProcessed: postgres.RetainForever})
	if err != nil {
		return retireResult{}, err
	}
	start := time.Now()
	pass, err := ret.RunOnce(ctx)
	res.seconds = time.Since(start).Seconds()
	if err != nil {
		return retireResult{}, err
	}
	var ok bool
	var detail string
	if layout == postgres.PartitionNone {
		ok, detail = pass.PublishedDeleted == int64(n), fmt.Sprintf("deleted %d of %d rows in batches of 1,000", pass.PublishedDeleted, n)
	} else {
		rep := pass.Partitions
		ok, detail = slices.Contains(rep.Dropped, postgres.PartitionDaily.PartitionName(postgres.DefaultTable, day)) && rep.DeadLettersMoved == 100 && rep.Failed == 0 && pass.PublishedDeleted == 0,
			fmt.Sprintf("dropped %v, moved %d dead letters, deleted %d rows, %d changes failed", rep.Dropped, rep.DeadLettersMoved, pass.PublishedDeleted, rep.Failed)
	}
	op.Close()
	if err := waitGone(ctx, s.pool, pids); err != nil {
		return retireResult{}, err
	}
	left, err := countRows(ctx, s.pool, t, "dead_at IS NULL")
	if err != nil {
		return retireResult{}, err
	}
	deadLetters, err := countRows(ctx, s.pool, t, "dead_at IS NOT NULL")
	if err != nil {
		return retireResult{}, err
	}
	if res.dead, err = deadTuples(ctx, s); err != nil {
		return retireResult{}, err
	}
	res.check = Check{OK: ok && left == 0 && deadLetters == 100, Detail: fmt.Sprintf("%s; %d published rows and %d dead letters left", detail, left, deadLetters)}
	return res, nil
}

func countRows(ctx context.Context, pool *pgxpool.Pool, table, where string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+where).Scan(&n)
	return n, err
}

// deadTuples is the dead rows of s's outbox table and its partitions in
// pg_stat_user_tables.
func deadTuples(ctx context.Context, s *schema) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(sum(n_dead_tup), 0)::int8 FROM pg_stat_user_tables
WHERE relid IN (SELECT relid FROM `+outboxTree+`)`, s.table(postgres.DefaultTable)).Scan(&n)
	return n, err
}

// outboxTree lists the relations of the table $1, partitioned or not
// (pg_partition_tree lists nothing for a plain table), with whether each
// holds rows.
const outboxTree = `(SELECT relid, isleaf FROM pg_partition_tree($1::regclass)
	UNION SELECT $1::regclass, (SELECT c.relkind <> 'p' FROM pg_class c WHERE c.oid = $1::regclass)) t`
