package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The growth workload: does a relay slow down as the outbox grows? The
// drain of the drain workload (one relay with the default Concurrency, a
// counting sink, NotifyOff, a 10 ms poll, a pool of 3) runs against a
// backlog of -events, one of -growth-events, and one of -events beside
// -growth-retained published rows kept. The retained rows are written
// published by one INSERT ... SELECT and never vacuumed, as a server with
// autovacuum off keeps them; every case is preloaded the same way
// (INSERT ... SELECT, then ANALYZE and CHECKPOINT, no VACUUM), so the cases
// differ only in what the table holds. Besides events/s, it records the
// CPU the relay's PostgreSQL backends spend per event and the pages its
// claims read per event from the two indexes they walk (the pending and
// the slot index): the figures that survive a busy machine.

// growthChunk is the rows of each backlog INSERT (one transaction each),
// so the backlog holds many transactions' rows, as a real outbox does.
const growthChunk = 10_000

// growthPayload is benchPayload as a SQL literal.
const growthPayload = `'` + benchPayload + `'::jsonb`

// uuidV7 makes a time-ordered UUID (version 7, as core.NewID) in SQL, so
// the settlements' primary-key entries land at the edge of the index as
// they do for events written through Add, not all over it.
const uuidV7 = `encode(overlay(overlay(uuid_send(gen_random_uuid())
	placing substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::int8) FROM 3) FROM 1 FOR 6)
	placing '\x70'::bytea FROM 7 FOR 1), 'hex')::uuid`

// growthCase is one state of the outbox the growth workload drains.
type growthCase struct {
	name              string
	backlog, retained int
}

func growthCaseName(batch, backlog, retained int) string {
	s := fmt.Sprintf("batch=%d backlog=%s", batch, groupThousands(strconv.Itoa(backlog)))
	if retained > 0 {
		s += fmt.Sprintf(" retained=%s", groupThousands(strconv.Itoa(retained)))
	}
	return s
}

// growthCases are the states drained at one batch size: the small
// backlog first (the others' baseline).
func (b *bench) growthCases(batch int) []growthCase {
	o := b.o
	return []growthCase{
		{growthCaseName(batch, o.events, 0), o.events, 0},
		{growthCaseName(batch, o.growthEvents, 0), o.growthEvents, 0},
		{growthCaseName(batch, o.events, o.growthRetained), o.events, o.growthRetained},
	}
}

// growthBacklogRatio and growthRetainedRatio name the workload's ratios.
func (b *bench) growthBacklogRatio() string {
	return fmt.Sprintf("%s / %s backlog", groupThousands(strconv.Itoa(b.o.growthEvents)), groupThousands(strconv.Itoa(b.o.events)))
}

func (b *bench) growthRetainedRatio() string {
	return fmt.Sprintf("with %s retained / without", groupThousands(strconv.Itoa(b.o.growthRetained)))
}

// growthResult is one drain of the growth workload.
type growthResult struct {
	drainResult
	indexPages float64 // pending- and slot-index pages read per event
	preload    time.Duration
}

func (b *bench) runGrowth(ctx context.Context) error {
	b.rep.Notes = append(b.rep.Notes, "growth workload: each state preloaded by INSERT ... SELECT generate_series (retained rows written published in one statement; "+
		fmt.Sprintf("the backlog in transactions of %d rows), then ANALYZE and CHECKPOINT, never VACUUM; drained as the drain workload drains (NotifyOff, 10 ms poll, pool of 3); ", growthChunk)+
		"claim index pages/event: pg_statio_user_indexes of the pending and slot indexes, read before the drain and after the relay's backends exited")
	for rep := 0; rep < b.o.reps; rep++ {
		for _, batch := range b.o.batches {
			for _, c := range rotate(b.growthCases(batch), rep) {
				prof := b.profilePath(rep, "growth", c.name, sysOutboxkit)
				res, err := attempt(ctx, b, fmt.Sprintf("growth %s rep %d", c.name, rep+1), func() (growthResult, error) {
					return b.growthDrain(ctx, batch, c, prof)
				})
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				b.logf("growth %s rep %d: %.0f events/s, PG %.1f µs/event, %.4f claim index pages/event (preload %.1f s)",
					c.name, rep+1, res.rate(c.backlog), res.dbCPU, res.indexPages, res.preload.Seconds())
				b.rep.add("growth", c.name, sysOutboxkit, "events/s", res.rate(c.backlog))
				b.rep.add("growth", c.name, sysOutboxkit, "Go CPU µs/event", res.procCPU)
				b.rep.add("growth", c.name, sysOutboxkit, "PG CPU µs/event", res.dbCPU)
				b.rep.add("growth", c.name, sysOutboxkit, "claim index pages/event", res.indexPages)
				res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "growth", c.name, sysOutboxkit, rep+1
				b.rep.check(res.check)
			}
		}
	}
	return nil
}

// growthRatios adds the workload's ratios, per batch size.
func (b *bench) growthRatios() {
	r := b.rep
	for _, batch := range b.o.batches {
		cases := b.growthCases(batch)
		base, big, kept := cases[0].name, cases[1].name, cases[2].name
		r.ratioOf("growth", b.growthBacklogRatio(), "events/s", big, sysOutboxkit, base, sysOutboxkit)
		r.ratioOf("growth", b.growthRetainedRatio(), "events/s", kept, sysOutboxkit, base, sysOutboxkit)
		r.ratioOf("growth", b.growthBacklogRatio()+", PG CPU per event", "PG CPU µs/event", big, sysOutboxkit, base, sysOutboxkit)
		r.ratioOf("growth", b.growthRetainedRatio()+", PG CPU per event", "PG CPU µs/event", kept, sysOutboxkit, base, sysOutboxkit)
	}
}

// growthDrain builds one state in a fresh schema and times a relay
// draining its backlog.
func (b *bench) growthDrain(ctx context.Context, batch int, c growthCase, profile string) (growthResult, error) {
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return growthResult{}, err
	}
	defer s.drop()
	t0 := time.Now()
	if err := growthPreload(ctx, b.o.dsn, s, c.backlog, c.retained); err != nil {
		return growthResult{}, err
	}
	preload := time.Since(t0)
	before, err := claimIndexPages(ctx, s)
	if err != nil {
		return growthResult{}, err
	}

	n := c.backlog
	pool, err := newPool(ctx, b.o.dsn, 3)
	if err != nil {
		return growthResult{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Schema: s.name, Notify: postgres.NotifyOff})
	if err != nil {
		return growthResult{}, err
	}
	sink := &countSink{}
	ctr := newSettleCounter(n)
	relay, err := core.NewRelay(store, sink, &core.RelayConfig{
		BatchSize:       batch,
		DisableNotifier: true,
		PollInterval:    10 * time.Millisecond,
		Hooks:           []core.RelayHook{ctr},
	})
	if err != nil {
		return growthResult{}, err
	}
	run, err := timeRelay(ctx, relay, ctr, func() (*cpuMeter, error) { return newCPUMeter(ctx, pool) }, n, profile)
	if err != nil {
		return growthResult{}, err
	}
	elapsed, procCPU, dbCPU := run.elapsed, run.procCPU, run.dbCPU
	// A backend's statistics reach pg_statio when it exits, at the latest.
	pool.Close()
	if err := waitGone(ctx, s.pool, run.backends); err != nil {
		return growthResult{}, err
	}
	after, err := claimIndexPages(ctx, s)
	if err != nil {
		return growthResult{}, err
	}
	// Counted after the index pages: the count may read the pending index.
	left, err := pendingCount(ctx, s)
	if err != nil {
		return growthResult{}, err
	}
	got := sink.n.Load()
	res := growthResult{
		drainResult: drainResult{seconds: elapsed.Seconds(), procCPU: perEvent(procCPU, n), dbCPU: perEvent(dbCPU, n)},
		indexPages:  float64(after-before) / float64(n),
		preload:     preload,
	}
	res.check = Check{OK: left == 0 && got == int64(n) && ctr.lost.Load() == 0 && after > before,
		Detail: fmt.Sprintf("sink received %d of %d, %d rows still pending, %d settled under a lost lease, %d claim index pages read", got, n, left, ctr.lost.Load(), after-before)}
	return res, nil
}

// growthPreload writes retained published rows and then a backlog of
// pending ones into s's outbox, then ANALYZE and CHECKPOINT. It writes on
// a connection of its own, closed before it returns, so that its index
// reads are in pg_statio before the drain's are counted.
func growthPreload(ctx context.Context, dsn string, s *schema, backlog, retained int) error {
	setup, err := newPool(ctx, dsn, 1)
	if err != nil {
		return err
	}
	defer setup.Close()
	pids, err := backendPIDs(ctx, setup)
	if err != nil {
		return err
	}
	t := s.table(postgres.DefaultTable)
	if retained > 0 {
		// History: written, available and published a millisecond apart
		// each, oldest first, as a relay that kept up would have left it.
		if _, err := setup.Exec(ctx, `INSERT INTO `+t+` (id, event_type, payload, created_at, available_at, published_at, attempts)
SELECT `+uuidV7+`, 'bench', `+growthPayload+`, ts, ts, ts + interval '1 millisecond', 1
FROM (SELECT now() - ($1::int - g) * interval '1 millisecond' AS ts FROM generate_series(1, $1::int) g) h`, retained); err != nil {
			return fmt.Errorf("preload %d published rows: %w", retained, err)
		}
	}
	for left := backlog; left > 0; left -= growthChunk {
		if _, err := setup.Exec(ctx, `INSERT INTO `+t+` (id, event_type, payload)
SELECT `+uuidV7+`, 'bench', `+growthPayload+` FROM generate_series(1, $1::int)`, min(left, growthChunk)); err != nil {
			return fmt.Errorf("preload backlog: %w", err)
		}
	}
	// Statistics for the planner, but no VACUUM: autovacuum may be off.
	if _, err := setup.Exec(ctx, "ANALYZE "+t); err != nil {
		return fmt.Errorf("analyze outbox: %w", err)
	}
	if _, err := setup.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint after the preload: %w", err)
	}
	setup.Close()
	return waitGone(ctx, s.pool, pids)
}

// claimIndexPages is the pages read so far (in shared buffers or not)
// from the indexes a claim walks: the pending and the slot index.
func claimIndexPages(ctx context.Context, s *schema) (int64, error) {
	var pages int64
	var n int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(sum(idx_blks_hit + idx_blks_read), 0)::int8, count(*)::int
FROM pg_statio_user_indexes WHERE schemaname = $1 AND relname = $2 AND indexrelname = ANY($3)`,
		s.name, postgres.DefaultTable, []string{postgres.DefaultTable + "_pending_idx", postgres.DefaultTable + "_slot_idx"}).Scan(&pages, &n)
	if err != nil {
		return 0, fmt.Errorf("claim index pages: %w", err)
	}
	if n != 2 {
		return 0, fmt.Errorf("claim index pages: found %d of the pending and slot indexes of %s", n, s.table(postgres.DefaultTable))
	}
	return pages, nil
}

// waitGone waits until the backends pids have exited.
func waitGone(ctx context.Context, admin *pgxpool.Pool, pids []int) error {
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n); err != nil {
			return fmt.Errorf("wait for backends to exit: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backends %v still running 30s after their pool closed", pids)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
