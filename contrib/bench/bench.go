package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/postgres"
)

// bench runs the workloads and fills the report.
type bench struct {
	o     *options
	admin *pgxpool.Pool // schema creation, preloads, checks
	rep   *Report
	log   io.Writer
	// stderr takes River's warnings (river.go); b.log writes to it too
	// with -v, so it is safe for concurrent use.
	stderr io.Writer
	// schemas this run created, dropped again at the end if a trial
	// could not. schemasMu guards it: workloads create schemas from
	// several goroutines (the partition soak's layouts side by side with
	// -soak-together).
	schemasMu sync.Mutex
	schemas   []string
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// System names in the tables.
const (
	sysOutboxkit   = "outboxkit"
	sysDelete      = "outboxkit DeletePublished"
	sysWatermill   = "watermill forwarder"
	sysCeiling     = "SQL ceiling"
	sysPgbench     = "pgbench"
	sysNotify      = "outboxkit NOTIFY (1 s poll)"
	sysPoll        = "outboxkit poll 10 ms"
	sysWmPoll      = "watermill poll 10 ms"
	sysAfter       = "outboxkit NotifyAfterCommit (1 s poll)"
	sysAsync       = "proposal: synchronous_commit=off"
	sysCeilAsync   = "SQL ceiling, synchronous_commit=off"
	sysAsyncNotify = "outboxkit NOTIFY, relay synchronous_commit=off (proposal)"
	sysReclaim     = "outboxkit poll 10 ms, claim again after a non-empty batch (proposal)"

	// outboxkit with the store's and the relay's zero configurations.
	sysDefaults = "outboxkit defaults"
	// River (river.go); the tuned name carries its settings
	// (riverTunedSys).
	sysRiverDefaults = "River defaults (MaxWorkers 100)"
	sysRiverTuned    = "River tuned"
	// The write workload's comparison with the article (write_insert.go).
	sysHand = "hand-written outbox INSERT (the article's table)"
	sysPgx  = "Go client (pgx), no event"
)

// caseRiver is the drain table's row of River, which has no batch size
// (each fetch takes as many jobs as it has free workers).
const caseRiver = "no batch size"

// runAll runs every selected workload, reps times each, and returns the
// report (partial when an error stopped the run).
func runAll(ctx context.Context, o *options, stderr io.Writer) (*Report, error) {
	started := time.Now()
	admin, err := newPool(ctx, o.dsn, 2)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	env, err := collectEnv(ctx, admin)
	if err != nil {
		return nil, err
	}
	stderr = &lockedWriter{w: stderr}
	b := &bench{o: o, admin: admin, log: io.Discard, stderr: stderr, rep: &Report{Env: env, Options: RunConfig{
		Workloads: o.workloads, Events: o.events, Reps: o.reps, Batches: o.batches, Rates: o.rates,
		LatencySeconds: o.latencyFor.Seconds(), WriteSeconds: o.writeFor.Seconds(), Writers: o.writers,
		Procs: o.procs, ProcsBatch: o.procBatch, QStashBatch: o.qsBatch, QStashConc: o.qsConc,
		IdleSeconds: o.idleFor.Seconds(), GrowthEvents: o.growthEvents, GrowthRetained: o.growthRetained,
		ConsumerRates: o.consumerRates, ConsumerSeconds: o.consumerFor.Seconds(), ConsumerSenders: o.consumerSenders, ConsumerClosed: o.consumerClosed,
		PreloadMethod:   fmt.Sprintf("preloads by COPY in transactions of %d rows, then VACUUM ANALYZE and CHECKPOINT", preloadChunk),
		CommandLineArgs: os.Args[1:],
	}}}
	if o.river {
		b.rep.Options.River = &RiverConfig{Version: riverVersion(), Defaults: riverDefaults().describe(), Tuned: b.riverTuned().describe()}
	}
	if o.verbose {
		b.log = stderr
	}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return nil, err
		}
	}
	steps := map[string]func(context.Context) error{
		"drain": b.runDrain, "latency": b.runLatency, "write": b.runWrite, "idle": b.runIdle, "growth": b.runGrowth,
		"qstash": b.runQStash, "brokers": b.runBrokers, "scaleout": b.runScaleOut, "consumer": b.runConsumer,
		"partitions": b.runPartitions, "partition-soak": b.runPartitionSoak,
	}
	for _, w := range append(slices.Clone(allWorkloads), optInWorkloads...) {
		if !o.has(w) {
			continue
		}
		if err = steps[w](ctx); err != nil {
			err = fmt.Errorf("%s: %w", w, err)
			break
		}
	}
	b.dropLeftovers(context.WithoutCancel(ctx))
	b.finish()
	b.rep.Env.LoadAfter = loadAvg()
	b.rep.Options.WallSeconds = time.Since(started).Seconds()
	if err == nil {
		for _, c := range b.rep.Checks {
			if !c.OK {
				err = fmt.Errorf("check failed: %s %s %s rep %d: %s", c.Workload, c.Case, c.System, c.Rep, c.Detail)
				break
			}
		}
	}
	return b.rep, err
}

// lockedWriter serialises writes to w: River logs from its own
// goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// rotate returns xs starting at index k (mod len), so repetitions alternate
// which system runs first and drift over a run does not favour one.
func rotate[T any](xs []T, k int) []T {
	k %= len(xs)
	return append(append([]T(nil), xs[k:]...), xs[:k]...)
}

func (b *bench) runDrain(ctx context.Context) error {
	n := b.o.events
	systems := []string{sysOutboxkit, sysWatermill, sysCeiling}
	if b.o.extras {
		systems = append(systems, sysDelete)
	}
	if b.o.proposals {
		systems = append(systems, sysAsync, sysCeilAsync)
	}
	if b.o.databaseSQL {
		for _, d := range sqlDrivers {
			systems = append(systems, sysSQLDrain(d))
		}
	}
	type trial struct {
		cas, sys string
		batch    int
		river    riverSetup
	}
	for rep := 0; rep < b.o.reps; rep++ {
		var trials []trial
		for _, batch := range b.o.batches {
			for _, sys := range rotate(systems, rep) {
				trials = append(trials, trial{cas: fmt.Sprintf("batch=%d", batch), sys: sys, batch: batch})
			}
		}
		if b.o.river {
			// River has no batch size, so it is not in the batch loop; it
			// runs first in odd repetitions and last in even ones, so drift
			// over a run does not favour one side.
			rt := rotate([]trial{
				{cas: caseRiver, sys: sysRiverDefaults, river: riverDefaults()},
				{cas: caseRiver, sys: b.riverTunedSys(), river: b.riverTuned()},
			}, rep)
			if rep%2 == 1 {
				trials = append(rt, trials...)
			} else {
				trials = append(trials, rt...)
			}
		}
		for _, t := range trials {
			cas, sys, batch := t.cas, t.sys, t.batch
			prof := b.profilePath(rep, "drain", cas, sys)
			res, err := attempt(ctx, b, fmt.Sprintf("drain %s %s rep %d", cas, sys, rep+1), func() (drainResult, error) {
				switch sys {
				case sysOutboxkit:
					return b.drainOutboxkit(ctx, batch, kindStore, prof)
				case sysDelete:
					return b.drainOutboxkit(ctx, batch, kindStoreDelete, prof)
				case sysAsync:
					return b.drainOutboxkit(ctx, batch, kindStoreAsync, prof)
				case sysWatermill:
					return b.drainWatermill(ctx, batch, prof)
				case sysCeilAsync:
					return b.drainCeiling(ctx, batch, true, prof)
				case sysCeiling:
					return b.drainCeiling(ctx, batch, false, prof)
				case sysSQLDrain(driverPQ):
					return b.drainOutboxkit(ctx, batch, kindSQLPQ, prof)
				case sysSQLDrain(driverPQBinary):
					return b.drainOutboxkit(ctx, batch, kindSQLPQBinary, prof)
				case sysSQLDrain(driverStdlib):
					return b.drainOutboxkit(ctx, batch, kindSQLStdlib, prof)
				default:
					return b.drainRiver(ctx, t.river, prof)
				}
			})
			if err != nil {
				return fmt.Errorf("%s %s: %w", sys, cas, err)
			}
			b.logf("drain %s %s rep %d: %.0f events/s", cas, sys, rep+1, res.rate(n))
			b.rep.add("drain", cas, sys, "events/s", res.rate(n))
			b.rep.add("drain", cas, sys, "Go CPU µs/event", res.procCPU)
			b.rep.add("drain", cas, sys, "PG CPU µs/event", res.dbCPU)
			if res.claimMs > 0 {
				// Per call; full batches go through SettleAndClaim, so
				// Settle alone only ends a drain.
				b.rep.add("drain", cas, sys, "claim ms", res.claimMs)
				b.rep.add("drain", cas, sys, "settle+claim ms", res.pipeMs)
			}
			res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "drain", cas, sys, rep+1
			b.rep.check(res.check)
		}
	}
	return nil
}

func (b *bench) runLatency(ctx context.Context) error {
	type variant struct {
		sys   string
		v     latencyVariant
		wm    bool
		river *riverSetup
	}
	for rep := 0; rep < b.o.reps; rep++ {
		for _, rate := range b.o.rates {
			cas := fmt.Sprintf("%d/s", rate)
			defaults, tuned := riverDefaults(), b.riverTuned()
			variants := []variant{
				{sys: sysDefaults, v: latencyVariant{defaults: true}},
				{sys: sysNotify, v: latencyVariant{mode: postgres.NotifyInTransaction}},
				{sys: sysAfter, v: latencyVariant{mode: postgres.NotifyAfterCommit}},
				{sys: sysPoll, v: latencyVariant{mode: postgres.NotifyOff}},
			}
			if slices.Contains(b.o.wmRates, rate) {
				variants = append(variants, variant{sys: sysWmPoll, wm: true})
			}
			if b.o.river {
				variants = append(variants, variant{sys: sysRiverDefaults, river: &defaults})
				if b.o.extras {
					variants = append(variants, variant{sys: b.riverTunedSys(), river: &tuned})
				}
			}
			if b.o.proposals {
				variants = append(variants,
					variant{sys: sysAsyncNotify, v: latencyVariant{mode: postgres.NotifyInTransaction, async: true}},
					variant{sys: sysReclaim, v: latencyVariant{mode: postgres.NotifyOff, reclaim: true}})
			}
			for _, v := range rotate(variants, rep) {
				prof := b.profilePath(rep, "latency", cas, v.sys)
				res, err := attempt(ctx, b, fmt.Sprintf("latency %s %s rep %d", cas, v.sys, rep+1), func() (latencyResult, error) {
					if v.wm {
						return b.latencyWatermill(ctx, rate, prof)
					}
					if v.river != nil {
						return b.latencyRiver(ctx, rate, *v.river, prof)
					}
					return b.latencyOutboxkit(ctx, rate, v.v, prof)
				})
				if err != nil {
					return fmt.Errorf("%s %s: %w", v.sys, cas, err)
				}
				b.logf("latency %s %s rep %d: p50 %v p99 %v max %v (%.0f/s)", cas, v.sys, rep+1, res.p50, res.p99, res.max, res.achieved)
				b.rep.add("latency", cas, v.sys, "p50 ms", ms(res.p50))
				b.rep.add("latency", cas, v.sys, "p99 ms", ms(res.p99))
				b.rep.add("latency", cas, v.sys, "max ms", ms(res.max))
				b.rep.add("latency", cas, v.sys, "committed/s", res.achieved)
				if !v.wm {
					// River's: the backends of its client's connections.
					b.rep.add("latency", cas, v.sys, "relay PG CPU µs/event", res.relayDBCPU)
				}
				res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "latency", cas, v.sys, rep+1
				b.rep.check(res.check)
			}
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func (b *bench) runWrite(ctx context.Context) error {
	if _, err := pgbenchPath(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "outboxkit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b.rep.Notes = append(b.rep.Notes, "write workload: "+b.pgbenchCommand()+" (script per case, see docs/BENCHMARKS.md)",
		"write workload, INSERT cases: the Go client (pgx) runs every system, the hand-written baseline with nothing consuming; "+
			"\"consumer running\" runs outboxkit's relay (core.RelayConfig and postgres.Config defaults) or River's workers during the measurement")
	for rep := 0; rep < b.o.reps; rep++ {
		ws, err := b.writeSchema(ctx)
		if err != nil {
			return err
		}
		channel := ws.main.name + "." + "outbox_events"
		for _, c := range rotate(b.writeCases(ws.main, channel), rep) {
			res, err := attempt(ctx, b, fmt.Sprintf("write %s %s rep %d", c.name, c.system, rep+1), func() (writeResult, error) {
				if err := resetWrite(ctx, ws); err != nil {
					return writeResult{}, err
				}
				prof := b.profilePath(rep, "write", c.name, c.system)
				var tps float64
				var err error
				switch {
				case c.insert:
					return b.writeInsert(ctx, ws, c, prof)
				case c.system == sysPgbench:
					tps, err = b.writePgbench(ctx, c, dir)
				case c.driver != "":
					return b.writeSQL(ctx, ws.main, c, prof)
				default:
					return b.writeGo(ctx, ws.main, c, prof)
				}
				return writeResult{tps: tps}, err
			})
			if err != nil {
				_ = ws.drop()
				return fmt.Errorf("%s %s: %w", c.system, c.name, err)
			}
			b.logf("write %s %s rep %d: %.0f tx/s", c.name, c.system, rep+1, res.tps)
			b.rep.add("write", c.name, c.system, "tx/s", res.tps)
			if res.procCPU > 0 {
				b.rep.add("write", c.name, c.system, "Go CPU µs/tx", res.procCPU)
				b.rep.add("write", c.name, c.system, "PG CPU µs/tx", res.dbCPU)
			}
			if c.consume {
				b.rep.add("write", c.name, c.system, "consumed/s", res.consumed)
			}
		}
		if err := ws.drop(); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) runQStash(ctx context.Context) error {
	n := b.o.events
	cas := fmt.Sprintf("batch=%d concurrency=%d", b.o.qsBatch, b.o.qsConc)
	for rep := 0; rep < b.o.reps; rep++ {
		res, err := attempt(ctx, b, fmt.Sprintf("qstash rep %d", rep+1), func() (qstashResult, error) {
			return b.drainQStash(ctx, b.profilePath(rep, "qstash"))
		})
		if err != nil {
			return err
		}
		b.logf("qstash rep %d: relay %.0f events/s, end to end %.0f events/s", rep+1, float64(n)/res.relaySeconds, float64(n)/res.e2eSeconds)
		b.rep.add("qstash", cas, sysOutboxkit, "relay events/s", float64(n)/res.relaySeconds)
		b.rep.add("qstash", cas, sysOutboxkit, "delivered events/s", float64(n)/res.e2eSeconds)
		b.rep.add("qstash", cas, sysOutboxkit, "Go CPU µs/event (relay+qstashdev+consumer)", res.procCPU)
		b.rep.add("qstash", cas, sysOutboxkit, "PG CPU µs/event", res.dbCPU)
		res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "qstash", cas, sysOutboxkit, rep+1
		b.rep.check(res.check)
	}
	return nil
}

func (b *bench) runScaleOut(ctx context.Context) error {
	n := b.o.events
	for rep := 0; rep < b.o.reps; rep++ {
		for _, procs := range b.o.procs {
			cas := fmt.Sprintf("procs=%d", procs)
			res, err := attempt(ctx, b, fmt.Sprintf("scaleout %s rep %d", cas, rep+1), func() (scaleResult, error) {
				return b.scaleOut(ctx, procs, rep)
			})
			if err != nil {
				return fmt.Errorf("%s: %w", cas, err)
			}
			b.logf("scaleout %s rep %d: %.0f events/s, peak RSS %.1f MiB", cas, rep+1, float64(n)/res.seconds, res.maxHWMMiB)
			sys := b.scaleSys()
			b.rep.add("scaleout", cas, sys, "events/s", float64(n)/res.seconds)
			b.rep.add("scaleout", cas, sys, "peak RSS MiB", res.maxHWMMiB)
			b.rep.add("scaleout", cas, sys, "Go CPU µs/event", res.cpuUsPerEv)
			b.rep.add("scaleout", cas, sys, "PG CPU µs/event", res.dbUsPerEv)
			b.rep.add("scaleout", cas, sys, "claim ms", res.claimMs)
			b.rep.add("scaleout", cas, sys, "settle+claim ms", res.pipeMs)
			res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "scaleout", cas, sys, rep+1
			b.rep.check(res.check)
		}
	}
	return nil
}

// scaleSys names the scale-out relays in the tables.
func (b *bench) scaleSys() string {
	if b.o.procConc > 0 {
		return fmt.Sprintf("%s batch=%d concurrency=%d", sysOutboxkit, b.o.procBatch, b.o.procConc)
	}
	return fmt.Sprintf("%s batch=%d", sysOutboxkit, b.o.procBatch)
}

// finish computes ratios and judges the targets.
func (b *bench) finish() {
	r := b.rep
	for _, batch := range b.o.batches {
		cas := fmt.Sprintf("batch=%d", batch)
		r.ratio("drain", cas, "outboxkit / watermill", "events/s", sysOutboxkit, sysWatermill)
		r.ratio("drain", cas, "outboxkit / SQL ceiling", "events/s", sysOutboxkit, sysCeiling)
		r.ratio("drain", cas, "watermill / SQL ceiling", "events/s", sysWatermill, sysCeiling)
		r.ratio("drain", cas, "DeletePublished / SQL ceiling", "events/s", sysDelete, sysCeiling)
		r.ratio("drain", cas, "DeletePublished / watermill", "events/s", sysDelete, sysWatermill)
		r.ratio("drain", cas, "synchronous_commit=off: outboxkit / SQL ceiling", "events/s", sysAsync, sysCeilAsync)
	}
	for _, cas := range []string{caseAlone, caseEvent} {
		r.ratio("write", cas, "outboxkit / pgbench", "tx/s", sysOutboxkit, sysPgbench)
	}
	for _, cas := range []string{caseAfter, caseUnpaced, caseInTxNotify} {
		r.ratioOf("write", "outboxkit / pgbench UPDATE + INSERT", "tx/s", cas, sysOutboxkit, caseEvent, sysPgbench)
	}
	r.ratioOf("write", "pgbench with NOTIFY / without", "tx/s", caseNotify, sysPgbench, caseEvent, sysPgbench)
	r.ratioOf("write", "with event / alone (pgbench)", "tx/s", caseEvent, sysPgbench, caseAlone, sysPgbench)
	r.ratioOf("write", "with event / alone (outboxkit)", "tx/s", caseEvent, sysOutboxkit, caseAlone, sysOutboxkit)
	tunedSys := b.riverTunedSys()
	for _, batch := range b.o.batches {
		cas := fmt.Sprintf("batch=%d", batch)
		r.ratioOf("drain", "outboxkit / River tuned", "events/s", cas, sysOutboxkit, caseRiver, tunedSys)
		r.ratioOf("drain", "outboxkit / River defaults", "events/s", cas, sysOutboxkit, caseRiver, sysRiverDefaults)
	}
	for _, rate := range b.o.rates {
		cas := fmt.Sprintf("%d/s", rate)
		for _, m := range []string{"p50 ms", "p99 ms"} {
			r.ratio("latency", cas, "outboxkit defaults / River defaults, "+strings.TrimSuffix(m, " ms"), m, sysDefaults, sysRiverDefaults)
		}
	}
	vsHand := func(name, cas, sys string) {
		r.ratioOf("write", name+" / hand-written outbox INSERT", "tx/s", cas, sys, caseInsertEvent, sysHand)
	}
	vsHand("outboxkit defaults", caseInsertConsumed, sysDefaults)
	vsHand("River defaults", caseInsertConsumed, sysRiverDefaults)
	vsHand("River tuned", caseInsertConsumed, tunedSys)
	vsHand("outboxkit defaults, no relay", caseInsertBare, sysDefaults)
	vsHand("River defaults, insert-only client", caseInsertBare, sysRiverDefaults)
	r.ratioOf("write", "hand-written outbox INSERT / INSERT alone", "tx/s", caseInsertEvent, sysHand, caseInsertAlone, sysPgx)
	b.sqlRatios()
	b.growthRatios()
	b.consumerRatios()
	scaleSys := b.scaleSys()
	for _, p := range b.o.procs {
		if p != 1 {
			r.ratioOf("scaleout", fmt.Sprintf("%d procs / 1 proc", p), "events/s", fmt.Sprintf("procs=%d", p), scaleSys, "procs=1", scaleSys)
		}
	}

	ratioTarget := func(name, workload, cas, ratio string, op string, threshold float64) {
		q := r.findRatio(workload, cas, ratio)
		v := 0.0
		if q != nil {
			v = q.Median
		}
		r.target(name, v, q != nil, op, threshold, "×")
	}
	ratioTarget("drain batch 100 ≥ 3 × Watermill", "drain", "batch=100", "outboxkit / watermill", ">=", 3)
	ratioTarget("drain batch 500 ≥ 3 × Watermill", "drain", "batch=500", "outboxkit / watermill", ">=", 3)
	ratioTarget("drain batch 100 ≥ 0.85 × the SQL ceiling", "drain", "batch=100", "outboxkit / SQL ceiling", ">=", 0.85)
	ratioTarget("drain batch 500 ≥ 0.85 × the SQL ceiling", "drain", "batch=500", "outboxkit / SQL ceiling", ">=", 0.85)
	for _, batch := range b.o.batches {
		ratioTarget(fmt.Sprintf("drain batch %d ≥ 3 × River tuned", batch), "drain", fmt.Sprintf("batch=%d", batch), "outboxkit / River tuned", ">=", 3)
	}
	seriesTarget := func(name, workload, cas, sys, metric, op string, threshold float64, unit string) {
		s := r.find(workload, cas, sys, metric)
		v := 0.0
		if s != nil {
			v = s.Median
		}
		r.target(name, v, s != nil, op, threshold, unit)
	}
	// Latency with outboxkit's defaults: what a user who configures
	// nothing gets.
	seriesTarget("latency, outboxkit defaults: p50 ≤ 1 ms @1,000/s", "latency", "1000/s", sysDefaults, "p50 ms", "<=", 1, "ms")
	seriesTarget("latency, outboxkit defaults: p99 ≤ 5 ms @1,000/s", "latency", "1000/s", sysDefaults, "p99 ms", "<=", 5, "ms")
	seriesTarget("latency, outboxkit defaults: p99 ≤ 10 ms @5,000/s", "latency", "5000/s", sysDefaults, "p99 ms", "<=", 10, "ms")
	seriesTarget("latency p50 @1,000/s with NOTIFY (in transaction)", "latency", "1000/s", sysNotify, "p50 ms", "<=", 2, "ms")
	seriesTarget("latency p99 @1,000/s with NOTIFY (in transaction)", "latency", "1000/s", sysNotify, "p99 ms", "<=", 10, "ms")
	seriesTarget("latency p50 @1,000/s with NOTIFY (after commit)", "latency", "1000/s", sysAfter, "p50 ms", "<=", 2, "ms")
	seriesTarget("latency p99 @1,000/s with NOTIFY (after commit)", "latency", "1000/s", sysAfter, "p99 ms", "<=", 10, "ms")
	ratioTarget("write: UPDATE + Add (NotifyAfterCommit) ≥ 90 % of pgbench UPDATE + INSERT", "write", caseAfter, "outboxkit / pgbench UPDATE + INSERT", ">=", 0.9)
	// The targets against River and the hand-written INSERT: the
	// threshold of a comparison is the other side's median.
	for _, rate := range b.o.rates {
		cas := fmt.Sprintf("%d/s", rate)
		for _, m := range []string{"p50 ms", "p99 ms"} {
			ok, river := r.find("latency", cas, sysDefaults, m), r.find("latency", cas, sysRiverDefaults, m)
			name := fmt.Sprintf("latency %s @%s/s: outboxkit defaults < River defaults", strings.TrimSuffix(m, " ms"), groupThousands(strconv.Itoa(rate)))
			if ok == nil || river == nil {
				r.targetVersus(name, 0, false, "<", 0, "ms", "River defaults")
			} else {
				r.targetVersus(name, ok.Median, true, "<", river.Median, "ms", "River defaults")
			}
		}
	}
	ratioTarget("write: outboxkit defaults (relay running) ≥ 0.95 × the hand-written outbox INSERT", "write", caseInsertConsumed, "outboxkit defaults / hand-written outbox INSERT", ">=", 0.95)
	const writeVs = "write: outboxkit defaults' ratio to the hand-written INSERT > River defaults' (consumers running)"
	okW, riverW := r.findRatio("write", caseInsertConsumed, "outboxkit defaults / hand-written outbox INSERT"), r.findRatio("write", caseInsertConsumed, "River defaults / hand-written outbox INSERT")
	if okW != nil && riverW != nil {
		r.targetVersus(writeVs, okW.Median, true, ">", riverW.Median, "×", "River defaults")
	} else {
		r.targetVersus(writeVs, 0, false, ">", 0, "×", "River defaults")
	}
	seriesTarget("idle relay (defaults) ≤ 1 % of one core of PostgreSQL", "idle", b.idleCase(), sysDefaults, "PG CPU % of one core", "<=", 1, "%")
	for _, batch := range b.o.batches {
		cases := b.growthCases(batch)
		ratioTarget(fmt.Sprintf("growth batch %d: %s backlog ≥ 0.9 × the %s backlog's rate", batch, groupThousands(strconv.Itoa(b.o.growthEvents)), groupThousands(strconv.Itoa(b.o.events))),
			"growth", cases[1].name, b.growthBacklogRatio(), ">=", 0.9)
		ratioTarget(fmt.Sprintf("growth batch %d: %s published rows kept ≥ 0.95 × the rate without", batch, groupThousands(strconv.Itoa(b.o.growthRetained))),
			"growth", cases[2].name, b.growthRetainedRatio(), ">=", 0.95)
	}
	seriesTarget("inbox receiver p99 ≤ 20 ms @1,000 deliveries/s", "consumer", consumerRateCase(1000), sysInboxReceiver, "p99 ms", "<=", 20, "ms")
	seriesTarget("qstashdev drain (delivered) ≥ 20,000 events/s", "qstash", fmt.Sprintf("batch=%d concurrency=%d", b.o.qsBatch, b.o.qsConc), sysOutboxkit, "delivered events/s", ">=", 20000, "events/s")
	seriesTarget("relay peak RSS draining ≤ 64 MiB", "scaleout", "procs=1", scaleSys, "peak RSS MiB", "<=", 64, "MiB")
	ratioTarget("4 relays ≥ 1 relay's throughput", "scaleout", "procs=4", "4 procs / 1 proc", ">=", 1)
}

// outboxSchema and createSchema create a schema and remember its name, so
// the run can drop it at the end if a trial could not (PostgreSQL restarted
// under it, say).
func (b *bench) outboxSchema(ctx context.Context) (*schema, error) {
	s, err := outboxSchema(ctx, b.admin)
	if err == nil {
		b.rememberSchema(s.name)
	}
	return s, err
}

func (b *bench) createSchema(ctx context.Context) (*schema, error) {
	s, err := createSchema(ctx, b.admin)
	if err == nil {
		b.rememberSchema(s.name)
	}
	return s, err
}

// rememberSchema adds name to the schemas dropped at the end; safe for
// concurrent use.
func (b *bench) rememberSchema(name string) {
	b.schemasMu.Lock()
	defer b.schemasMu.Unlock()
	b.schemas = append(b.schemas, name)
}

// dropLeftovers drops the schemas of this run that still exist.
func (b *bench) dropLeftovers(ctx context.Context) {
	b.schemasMu.Lock()
	schemas := slices.Clone(b.schemas)
	b.schemasMu.Unlock()
	rows, err := b.admin.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname = ANY($1)`, schemas)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		s := &schema{name: n, pool: b.admin}
		if err := s.drop(); err != nil {
			b.logf("could not drop schema %s: %v", n, err)
		}
	}
}

// maxAttempts bounds how often one trial runs when PostgreSQL restarts
// under it: the server is shared, and other suites (the long chaos suite)
// restart it.
const maxAttempts = 3

// attempt runs one trial; if it fails or PostgreSQL restarted while it ran
// (pg_postmaster_start_time changed), it waits for the server and runs the
// trial again, noting why in the report.
func attempt[T any](ctx context.Context, b *bench, what string, fn func() (T, error)) (T, error) {
	var zero T
	for i := 1; ; i++ {
		before, _ := b.postmasterStart(ctx)
		res, err := fn()
		after, aerr := b.postmasterStart(ctx)
		restarted := aerr != nil || !after.Equal(before)
		if err == nil && !restarted {
			return res, nil
		}
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		why := "PostgreSQL restarted during the trial"
		if err != nil {
			why = err.Error()
		}
		if i == maxAttempts || (err != nil && !restarted && !connectionLost(err)) {
			if err == nil {
				err = fmt.Errorf("%s", why)
			}
			return zero, err
		}
		b.logf("%s: attempt %d discarded (%s); running it again", what, i, why)
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("%s: attempt %d discarded and run again: %s", what, i, why))
		if err := b.waitForServer(ctx); err != nil {
			return zero, err
		}
	}
}

// postmasterStart is when the PostgreSQL server started. It asks twice: the
// first try may find a pooled connection a restart has killed.
func (b *bench) postmasterStart(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := b.admin.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&t)
	if err != nil {
		err = b.admin.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&t)
	}
	return t, err
}

// waitForServer waits up to a minute for PostgreSQL to answer again.
func (b *bench) waitForServer(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := b.postmasterStart(ctx); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL did not come back: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second): // polling a server that is restarting
		}
	}
}

// connectionLost reports errors that a server restart or a terminated
// backend causes, as opposed to a bug in the harness.
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 57 (operator intervention: admin shutdown, crash
		// shutdown, cannot connect now) and 08 (connection exception).
		return strings.HasPrefix(pgErr.Code, "57") || strings.HasPrefix(pgErr.Code, "08")
	}
	s := err.Error()
	for _, frag := range []string{"conn closed", "connection refused", "unexpected EOF", "broken pipe", "connection reset", "failed to connect", "terminating connection"} {
		if strings.Contains(s, frag) {
			return true
		}
	}
	return false
}
