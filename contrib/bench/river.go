package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River (github.com/riverqueue/river over riverpgxv5) is the job queue a Go
// team would pick instead of an outbox: insert a job in the business
// transaction (InsertTx) and let a worker publish it. It runs beside
// outboxkit in the drain, latency and write workloads, twice: with its
// defaults, because most users never change them, and tuned for
// throughput, because a team choosing it for this job would. Its tables live
// in a schema of their own, created by rivermigrate for each trial and
// dropped after it, so they share nothing with outboxkit's.

// riverSetup is one River configuration.
type riverSetup struct {
	// maxWorkers is the default queue's MaxWorkers. River has no default
	// for it (QueueConfig requires it); 100 is what its documentation and
	// examples use, so it stands for "defaults".
	maxWorkers int
	// cooldown and poll are Config.FetchCooldown and FetchPollInterval;
	// zero leaves River's defaults (100 ms and 1 s).
	cooldown, poll time.Duration
	// conns is the size of the pool handed to River.
	conns int32
}

// riverDefaults is River as its documentation sets it up, on a pool the
// size pgxpool would choose by default (max(4, NumCPU)).
func riverDefaults() riverSetup {
	return riverSetup{maxWorkers: 100, conns: int32(max(4, runtime.NumCPU()))}
}

// riverTuned is River tuned for throughput from the flags. Its pool is
// larger than the default one so that fetches, completions and the
// listener never queue for a connection behind each other.
func (b *bench) riverTuned() riverSetup {
	return riverSetup{maxWorkers: b.o.riverWorkers, cooldown: b.o.riverCooldown, poll: b.o.riverPoll, conns: 8}
}

// riverTunedSys names the tuned configuration in the tables.
func (b *bench) riverTunedSys() string {
	return fmt.Sprintf("%s (MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v)", sysRiverTuned, b.o.riverWorkers, b.o.riverCooldown, b.o.riverPoll)
}

// describe says what a setup is, for the report.
func (s riverSetup) describe() string {
	cooldown, poll := "100ms (default)", "1s (default)"
	if s.cooldown > 0 {
		cooldown = s.cooldown.String()
	}
	if s.poll > 0 {
		poll = s.poll.String()
	}
	return fmt.Sprintf("queue %q MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s, LISTEN/NOTIFY on, batch completer, pool of %d connections",
		river.QueueDefault, s.maxWorkers, cooldown, poll, s.conns)
}

// riverVersion is the version of River this binary was built with.
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}

// riverArgs is one job: the sequence number the harness tracks it by, and
// the payload every system carries.
type riverArgs struct {
	Seq     int             `json:"seq"`
	Payload json.RawMessage `json:"payload"`
}

func (riverArgs) Kind() string { return "bench" }

// riverProbe is the Seq of the job a latency run inserts before it starts
// pacing, to know River's producer is fetching.
const riverProbe = -1

// riverWorker is the no-op worker every River job goes to: River's
// counterpart of countSink. It counts jobs and, as configured, notes
// duplicates (seen) or stamps arrivals (arrivals).
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	worked   atomic.Int64
	dups     atomic.Int64
	seen     []atomic.Bool // drain: one per job
	arrivals *arrivals     // latency
	probed   chan struct{}
	probe    sync.Once
}

func newRiverWorker() *riverWorker { return &riverWorker{probed: make(chan struct{})} }

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	seq := job.Args.Seq
	if seq == riverProbe {
		w.probe.Do(func() { close(w.probed) })
		return nil
	}
	if w.arrivals != nil {
		w.arrivals.arriveIndex(seq, nanotime())
	}
	if seq >= 0 && seq < len(w.seen) && w.seen[seq].Swap(true) {
		w.dups.Add(1)
	}
	w.worked.Add(1)
	return nil
}

// riverLogger is River's logger: warnings and errors on stderr. River's own
// default writes to stdout, where the JSON report goes.
func (b *bench) riverLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// riverSchema creates a fresh schema and River's tables in it with
// rivermigrate.
func (b *bench) riverSchema(ctx context.Context) (*schema, error) {
	s, err := b.createSchema(ctx)
	if err != nil {
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(b.admin), &rivermigrate.Config{Schema: s.name, Logger: b.riverLogger()})
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		_ = s.drop()
		return nil, fmt.Errorf("river migrate %s: %w", s.name, err)
	}
	return s, nil
}

// riverClient is a client working the default queue with w, or an
// insert-only client when w is nil.
func (b *bench) riverClient(pool *pgxpool.Pool, s *schema, setup riverSetup, w *riverWorker) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{Logger: b.riverLogger(), Schema: s.name}
	if w != nil {
		workers := river.NewWorkers()
		river.AddWorker(workers, w)
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: setup.maxWorkers}}
		cfg.FetchCooldown = setup.cooldown
		cfg.FetchPollInterval = setup.poll
	}
	c, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return c, nil
}

// stopRiver stops a started client, waiting for its running jobs and
// completions, even when ctx is done.
func stopRiver(c *river.Client[pgx.Tx]) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		return fmt.Errorf("stop river client: %w", err)
	}
	return nil
}

// riverApp is the application_name of a River trial's connections, by
// which the CPU meter finds them (see newAppCPUMeter).
func riverApp(s *schema) string { return "bench-river-" + s.name }

// preloadRiver inserts n available jobs with InsertManyFast (COPY), in
// calls of preloadChunk jobs, then VACUUM ANALYZE and CHECKPOINT as
// preloadOutbox does.
func (b *bench) preloadRiver(ctx context.Context, s *schema, n int) error {
	c, err := b.riverClient(s.pool, s, riverSetup{}, nil)
	if err != nil {
		return err
	}
	payload := json.RawMessage(benchPayload)
	params := make([]river.InsertManyParams, 0, preloadChunk)
	for start := 0; start < n; start += preloadChunk {
		params = params[:0]
		for i := start; i < min(start+preloadChunk, n); i++ {
			params = append(params, river.InsertManyParams{Args: riverArgs{Seq: i, Payload: payload}})
		}
		if _, err := c.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("preload river: %w", err)
		}
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+s.table("river_job")); err != nil {
		return fmt.Errorf("vacuum river_job: %w", err)
	}
	if _, err := s.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint after the preload: %w", err)
	}
	return nil
}

// riverDrainTimeout bounds one River drain. River's defaults fetch at most
// MaxWorkers jobs per FetchCooldown (100 per 100 ms), so they need about a
// millisecond per job; the bound leaves three.
func riverDrainTimeout(n int) time.Duration {
	return 2*time.Minute + 3*time.Duration(n)*time.Millisecond
}

// drainRiver preloads n jobs and times a client from Start until River has
// recorded every job as completed: the completion events of its
// subscription come after the completer's UPDATE, as outboxkit's drain ends
// when every row is settled.
func (b *bench) drainRiver(ctx context.Context, setup riverSetup, profile string) (drainResult, error) {
	n := b.o.events
	s, err := b.riverSchema(ctx)
	if err != nil {
		return drainResult{}, err
	}
	defer s.drop()
	if err := b.preloadRiver(ctx, s, n); err != nil {
		return drainResult{}, err
	}
	pool, err := newPool(ctx, b.o.dsn, setup.conns, "application_name", riverApp(s))
	if err != nil {
		return drainResult{}, err
	}
	defer pool.Close()
	w := newRiverWorker()
	w.seen = make([]atomic.Bool, n)
	client, err := b.riverClient(pool, s, setup, w)
	if err != nil {
		return drainResult{}, err
	}
	// Room for every event: River drops events a full channel cannot take.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer unsubscribe()

	meter, err := newAppCPUMeter(ctx, b.admin, riverApp(s))
	if err != nil {
		return drainResult{}, err
	}
	stopProf := startProfile(profile)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		stopProf()
		return drainResult{}, fmt.Errorf("start river client: %w", err)
	}
	completed := 0
	timeout := time.After(riverDrainTimeout(n))
	var waitErr error
	for completed < n && waitErr == nil {
		select {
		case ev, ok := <-events:
			if !ok {
				waitErr = fmt.Errorf("river subscription closed with %d of %d jobs completed", completed, n)
			} else if ev.Kind == river.EventKindJobCompleted {
				completed++
			}
		case <-timeout:
			waitErr = fmt.Errorf("river drain timed out with %d of %d jobs completed (%d worked)", completed, n, w.worked.Load())
		case <-ctx.Done():
			waitErr = ctx.Err()
		}
	}
	elapsed := time.Since(start)
	procCPU, dbCPU := meter.stop()
	stopProf()
	stopErr := stopRiver(client)
	if waitErr != nil {
		return drainResult{}, waitErr
	}
	if stopErr != nil {
		return drainResult{}, stopErr
	}
	var done, total int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FROM `+s.table("river_job")).Scan(&done, &total); err != nil {
		return drainResult{}, err
	}
	worked, dups := w.worked.Load(), w.dups.Load()
	return drainResult{seconds: elapsed.Seconds(), procCPU: perEvent(procCPU, n), dbCPU: perEvent(dbCPU, n), check: Check{
		OK:     worked == int64(n) && dups == 0 && done == int64(n) && total == int64(n),
		Detail: fmt.Sprintf("worker ran %d jobs of %d (%d twice), %d of %d rows completed", worked, n, dups, done, total),
	}}, nil
}

// latencyRiver is latencyOutboxkit for River: each event is a job inserted
// with InsertTx in its producer's own transaction; a client with setup
// works the jobs, and arrival is when the worker runs.
func (b *bench) latencyRiver(ctx context.Context, rate int, setup riverSetup, profile string) (latencyResult, error) {
	n := rate * int(b.o.latencyFor/time.Second)
	s, err := b.riverSchema(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	defer s.drop()
	arr := newIndexedArrivals(n)
	payload := json.RawMessage(benchPayload)
	workPool, err := newPool(ctx, b.o.dsn, setup.conns, "application_name", riverApp(s))
	if err != nil {
		return latencyResult{}, err
	}
	defer workPool.Close()
	prodPool, err := newPool(ctx, b.o.dsn, int32(b.o.writers))
	if err != nil {
		return latencyResult{}, err
	}
	defer prodPool.Close()
	w := newRiverWorker()
	w.arrivals = arr
	// One client both inserts and works, as in a service that enqueues
	// and runs its own jobs: its insert notifications (at most one per
	// FetchCooldown) are what wakes its producer.
	client, err := b.riverClient(workPool, s, setup, w)
	if err != nil {
		return latencyResult{}, err
	}
	insert := func(ctx context.Context, seq int) error {
		tx, err := prodPool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := client.InsertTx(ctx, tx, riverArgs{Seq: seq, Payload: payload}, nil); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	meter, err := newAppCPUMeter(ctx, b.admin, riverApp(s))
	if err != nil {
		return latencyResult{}, err
	}
	if err := client.Start(ctx); err != nil {
		return latencyResult{}, fmt.Errorf("start river client: %w", err)
	}
	defer stopRiver(client) //nolint:errcheck // stopped explicitly below; a no-op then
	// Pacing starts once a job has gone through, so River's start-up is
	// not in the figures.
	if err := insert(ctx, riverProbe); err != nil {
		return latencyResult{}, err
	}
	select {
	case <-w.probed:
	case <-time.After(10 * time.Second):
		return latencyResult{}, fmt.Errorf("river worked no probe job within 10 s")
	case <-ctx.Done():
		return latencyResult{}, ctx.Err()
	}

	stopProf := startProfile(profile)
	achieved, err := pace(ctx, n, rate, b.o.writers, func(ctx context.Context, i int) error {
		if err := insert(ctx, i); err != nil {
			return err
		}
		arr.committed(i)
		return nil
	})
	if err == nil {
		// River's defaults work at most about 1,000 jobs a second (100 per
		// 100 ms fetch cooldown), so above that rate it drains its backlog
		// after the producers stop; the wait allows for it.
		select {
		case <-arr.all:
		case <-time.After(30*time.Second + time.Duration(n)*time.Millisecond):
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	_, dbCPU := meter.stop()
	stopProf()
	if serr := stopRiver(client); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return latencyResult{}, err
	}
	res := summarize(arr, n, achieved)
	res.relayDBCPU = perEvent(dbCPU, n)
	return res, nil
}

// riverWriter is River on the write side of the write workload: a client
// whose InsertTx adds the event, working its jobs during the measurement
// when started.
type riverWriter struct {
	client *river.Client[pgx.Tx]
	worker *riverWorker
	pool   *pgxpool.Pool
	schema *schema
}

// newRiverWriter makes the client for rs; with consume, a started client
// working the jobs on a pool of its own, else an insert-only client.
func (b *bench) newRiverWriter(ctx context.Context, rs *schema, setup riverSetup, consume bool) (*riverWriter, error) {
	rw := &riverWriter{schema: rs}
	if !consume {
		c, err := b.riverClient(rs.pool, rs, setup, nil)
		rw.client = c
		return rw, err
	}
	pool, err := newPool(ctx, b.o.dsn, setup.conns)
	if err != nil {
		return nil, err
	}
	rw.pool, rw.worker = pool, newRiverWorker()
	if rw.client, err = b.riverClient(pool, rs, setup, rw.worker); err == nil {
		err = rw.client.Start(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return rw, nil
}

// add inserts one job in tx.
func (rw *riverWriter) add(ctx context.Context, tx pgx.Tx) error {
	_, err := rw.client.InsertTx(ctx, tx, riverArgs{Seq: 0, Payload: json.RawMessage(benchPayload)}, nil)
	return err
}

// close stops the client and returns how many jobs its worker ran.
func (rw *riverWriter) close() (int64, error) {
	if rw.pool == nil {
		return 0, nil
	}
	err := stopRiver(rw.client)
	rw.pool.Close()
	return rw.worker.worked.Load(), err
}
