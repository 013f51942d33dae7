package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// drainResult is one timed drain.
type drainResult struct {
	seconds  float64
	procCPU  float64 // µs of this process's CPU per event
	dbCPU    float64 // µs of the system's PostgreSQL backends' CPU per event
	claimMs  float64 // mean per Claim (outboxkit only)
	settleMs float64 // mean per Settle (outboxkit only)
	pipeMs   float64 // mean per SettleAndClaim (outboxkit only)
	check    Check
}

func (d drainResult) rate(n int) float64 { return float64(n) / d.seconds }

// drainTimeout bounds one drain: generous, so only a hang trips it.
func drainTimeout(n int) time.Duration { return time.Minute + time.Duration(n)*time.Millisecond }

// relayKind selects what drainOutboxkit runs.
type relayKind int

const (
	kindStore       relayKind = iota // core.Relay over postgres.Store
	kindStoreDelete                  // the same with Config.DeletePublished
	kindStoreAsync                   // kindStore, synchronous_commit=off on the relay's connections (a proposal)
	kindSQLPQ                        // kindStore on a *sql.DB of lib/pq (databasesql.go)
	kindSQLPQBinary                  // the same with lib/pq's binary_parameters=yes
	kindSQLStdlib                    // kindStore on a *sql.DB of pgx's stdlib driver
)

// sqlDriver is the database/sql driver of the kind's store, "" for a
// store on a pgx pool.
func (k relayKind) sqlDriver() string {
	switch k {
	case kindSQLPQ:
		return driverPQ
	case kindSQLPQBinary:
		return driverPQBinary
	case kindSQLStdlib:
		return driverStdlib
	}
	return ""
}

// drainOutboxkit preloads the outbox and times a relay (Concurrency 2, the
// default) until every event is settled as published.
func (b *bench) drainOutboxkit(ctx context.Context, batch int, kind relayKind, profile string) (drainResult, error) {
	n := b.o.events
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return drainResult{}, err
	}
	defer s.drop()
	if _, err := preloadOutbox(ctx, s, n); err != nil {
		return drainResult{}, err
	}
	var params []string
	if kind == kindStoreAsync {
		params = asyncCommit()
	}
	cfg := &postgres.Config{Schema: s.name, DeletePublished: kind == kindStoreDelete, Notify: postgres.NotifyOff}
	// The store's three connections: a pgx pool, or a *sql.DB.
	var inner *postgres.Store
	var meter func() (*cpuMeter, error)
	if drv := kind.sqlDriver(); drv != "" {
		db, err := openSQLDB(ctx, drv, b.o.dsn, 3)
		if err != nil {
			return drainResult{}, err
		}
		defer db.Close()
		pids, err := sqlBackendPIDs(ctx, db, 3)
		if err != nil {
			return drainResult{}, err
		}
		meter = func() (*cpuMeter, error) { return pidMeter(pids), nil }
		inner, err = postgres.New(db, cfg)
		if err != nil {
			return drainResult{}, err
		}
	} else {
		pool, err := newPool(ctx, b.o.dsn, 3, params...)
		if err != nil {
			return drainResult{}, err
		}
		defer pool.Close()
		meter = func() (*cpuMeter, error) { return newCPUMeter(ctx, pool) }
		if inner, err = postgres.New(pool, cfg); err != nil {
			return drainResult{}, err
		}
	}
	ist, stats := instrument(inner, nil)
	sink := &countSink{}
	ctr := newSettleCounter(n)
	relay, err := core.NewRelay(ist, sink, &core.RelayConfig{
		BatchSize:       batch,
		DisableNotifier: true,
		// Like Watermill's in this comparison; a drain only waits on it if
		// a claim comes back short before the end.
		PollInterval: 10 * time.Millisecond,
		Hooks:        []core.RelayHook{ctr},
	})
	if err != nil {
		return drainResult{}, err
	}

	run, err := timeRelay(ctx, relay, ctr, meter, n, profile)
	if err != nil {
		return drainResult{}, err
	}
	elapsed, procCPU, dbCPU := run.elapsed, run.procCPU, run.dbCPU

	res := drainResult{seconds: elapsed.Seconds(), claimMs: stats.claim.meanMillis(), settleMs: stats.settle.meanMillis(), pipeMs: stats.settleClaim.meanMillis(),
		procCPU: perEvent(procCPU, n), dbCPU: perEvent(dbCPU, n)}
	left, err := pendingCount(ctx, s)
	if err != nil {
		return drainResult{}, err
	}
	got := sink.n.Load()
	res.check = Check{OK: left == 0 && got == int64(n) && ctr.lost.Load() == 0,
		Detail: fmt.Sprintf("sink received %d of %d, %d rows still pending, %d settled under a lost lease", got, n, left, ctr.lost.Load())}
	return res, nil
}

// relayRun is what timeRelay measured.
type relayRun struct {
	elapsed        time.Duration
	procCPU, dbCPU time.Duration
	// backends are the PostgreSQL backends of the relay's pool.
	backends []int
}

// timeRelay runs relay until ctr counts n events settled (or the drain
// times out), timing it and measuring the CPU of this process and of the
// relay's backends (the meter that newMeter starts), with a CPU profile
// to profile when set.
func timeRelay(ctx context.Context, relay *core.Relay, ctr *settleCounter, newMeter func() (*cpuMeter, error), n int, profile string) (relayRun, error) {
	meter, err := newMeter()
	if err != nil {
		return relayRun{}, err
	}
	stopProf := startProfile(profile)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- relay.Run(rctx) }()
	var waitErr error
	select {
	case <-ctr.done:
	case <-time.After(drainTimeout(n)):
		waitErr = fmt.Errorf("drain timed out with %d of %d events settled", ctr.n.Load(), n)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	run := relayRun{elapsed: time.Since(start), backends: meter.pids}
	run.procCPU, run.dbCPU = meter.stop()
	stopProf()
	cancel()
	if err := <-runErr; err != nil && waitErr == nil && !errors.Is(err, context.Canceled) {
		waitErr = err
	}
	return run, waitErr
}

// ceilingSQL is the protocol's SQL ceiling: one statement selects pending
// rows FOR UPDATE SKIP LOCKED, marks them published and returns the
// payloads. It takes no lease (a relay that crashes after it loses the
// events), so it only bounds what a relay can do.
//
// The locked rows are matched by physical address ("ctid = ANY(ARRAY(...))",
// a TID scan), the fastest form measured on this table: a CTE joined on id
// costs a primary-key probe per row, and can become a hash join over the
// whole table. The ceiling must be the fastest form of the statement, or
// every ratio to it would flatter the relay.
func ceilingSQL(s *schema) string {
	t := s.table(postgres.DefaultTable)
	return `UPDATE ` + t + ` t SET published_at = now()
WHERE t.ctid = ANY(ARRAY(
	SELECT ctid FROM ` + t + `
	WHERE published_at IS NULL AND dead_at IS NULL
	ORDER BY available_at, pos
	LIMIT $1
	FOR UPDATE SKIP LOCKED))
RETURNING t.id, t.payload`
}

// drainCeiling times the ceiling statement run by two workers until the
// outbox is empty; async runs it with synchronous_commit=off.
func (b *bench) drainCeiling(ctx context.Context, batch int, async bool, profile string) (drainResult, error) {
	n := b.o.events
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return drainResult{}, err
	}
	defer s.drop()
	if _, err := preloadOutbox(ctx, s, n); err != nil {
		return drainResult{}, err
	}
	const workers = 2
	var params []string
	if async {
		params = asyncCommit()
	}
	pool, err := newPool(ctx, b.o.dsn, workers, params...)
	if err != nil {
		return drainResult{}, err
	}
	defer pool.Close()
	sql := ceilingSQL(s)
	sink := &countSink{}
	errs := make(chan error, workers)
	meter, err := newCPUMeter(ctx, pool)
	if err != nil {
		return drainResult{}, err
	}

	stopProf := startProfile(profile)
	start := time.Now()
	for w := 0; w < workers; w++ {
		go func() { errs <- ceilingWorker(ctx, pool, sql, batch, sink) }()
	}
	var firstErr error
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	elapsed := time.Since(start)
	procCPU, dbCPU := meter.stop()
	stopProf()
	if firstErr != nil {
		return drainResult{}, firstErr
	}
	left, err := pendingCount(ctx, s)
	if err != nil {
		return drainResult{}, err
	}
	got := sink.n.Load()
	return drainResult{seconds: elapsed.Seconds(), procCPU: perEvent(procCPU, n), dbCPU: perEvent(dbCPU, n), check: Check{OK: left == 0 && got == int64(n),
		Detail: fmt.Sprintf("sink received %d of %d, %d rows still pending", got, n, left)}}, nil
}

// ceilingWorker runs the ceiling statement until it returns no row, handing
// each batch (ids and payloads) to the sink as events.
func ceilingWorker(ctx context.Context, pool *pgxpool.Pool, sql string, batch int, sink *countSink) error {
	events := make([]core.Event, 0, batch)
	for {
		rows, err := pool.Query(ctx, sql, batch)
		if err != nil {
			return fmt.Errorf("ceiling: %w", err)
		}
		events = events[:0]
		for rows.Next() {
			var e core.Event
			if err := rows.Scan(&e.ID, (*[]byte)(&e.Payload)); err != nil {
				rows.Close()
				return fmt.Errorf("ceiling: %w", err)
			}
			events = append(events, e)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("ceiling: %w", err)
		}
		if len(events) == 0 {
			return nil
		}
		if err := sink.Publish(ctx, events); err != nil {
			return err
		}
	}
}

// watermillTopic is the forwarder's topic; the sink topic is what the
// envelopes name as their destination.
const (
	watermillTopic = "outbox"
	watermillSink  = "sink"
)

// watermillAdapters are the forwarder's schema and offsets adapters, with
// their tables in s.
func watermillAdapters(s *schema, batch int) (wmsql.DefaultPostgreSQLSchema, wmsql.DefaultPostgreSQLOffsetsAdapter) {
	return wmsql.DefaultPostgreSQLSchema{
			GenerateMessagesTableName: func(topic string) string { return s.table("watermill_" + topic) },
			SubscribeBatchSize:        batch,
		}, wmsql.DefaultPostgreSQLOffsetsAdapter{
			GenerateMessagesOffsetsTableName: func(topic string) string { return s.table("watermill_offsets_" + topic) },
		}
}

// watermillForwarder builds the subscriber (10 ms poll) and the forwarder
// into sink, creating the tables in s.
func watermillForwarder(ctx context.Context, s *schema, pool *pgxpool.Pool, batch int, sink message.Publisher) (*forwarder.Forwarder, error) {
	schemaAdapter, offsets := watermillAdapters(s, batch)
	logger := watermill.NopLogger{}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{
		PollInterval:   10 * time.Millisecond,
		SchemaAdapter:  schemaAdapter,
		OffsetsAdapter: offsets,
	}, logger)
	if err != nil {
		return nil, err
	}
	if err := sub.SubscribeInitialize(watermillTopic); err != nil {
		return nil, fmt.Errorf("watermill schema: %w", err)
	}
	return forwarder.NewForwarder(sub, sink, logger, forwarder.Config{ForwarderTopic: watermillTopic, CloseTimeout: 5 * time.Second})
}

// capturePublisher collects what forwarder.Publisher would write, so the
// preload stores exactly Watermill's envelopes.
type capturePublisher struct{ msgs []*message.Message }

func (c *capturePublisher) Publish(_ string, msgs ...*message.Message) error {
	c.msgs = append(c.msgs, msgs...)
	return nil
}
func (c *capturePublisher) Close() error { return nil }

// preloadWatermill writes n enveloped messages into the forwarder's table by
// COPY (transaction_id filled by a temporary column default, as the
// publisher's pg_current_xact_id() would), in transactions of preloadChunk
// rows.
func preloadWatermill(ctx context.Context, s *schema, n int) error {
	capture := &capturePublisher{}
	fp := forwarder.NewPublisher(capture, forwarder.PublisherConfig{ForwarderTopic: watermillTopic})
	for i := 0; i < n; i++ {
		if err := fp.Publish(watermillSink, message.NewMessage(core.NewID().String(), []byte(benchPayload))); err != nil {
			return err
		}
	}
	table := s.table("watermill_" + watermillTopic)
	if _, err := s.pool.Exec(ctx, `ALTER TABLE `+table+` ALTER COLUMN transaction_id SET DEFAULT pg_current_xact_id()`); err != nil {
		return err
	}
	for start := 0; start < n; start += preloadChunk {
		end := min(start+preloadChunk, n)
		rows := make([][]any, 0, end-start)
		for _, m := range capture.msgs[start:end] {
			md, err := json.Marshal(m.Metadata)
			if err != nil {
				return err
			}
			rows = append(rows, []any{m.UUID, string(m.Payload), string(md)})
		}
		if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{s.name, "watermill_" + watermillTopic}, []string{"uuid", "payload", "metadata"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("preload watermill: %w", err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ALTER TABLE `+table+` ALTER COLUMN transaction_id DROP DEFAULT`); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return err
	}
	// As preloadOutbox does: the drain must not flush the preload's pages.
	_, err := s.pool.Exec(ctx, "CHECKPOINT")
	return err
}

// drainWatermill times Watermill's forwarder until the sink has every
// message and the consumer group's offset is acknowledged past the last.
func (b *bench) drainWatermill(ctx context.Context, batch int, profile string) (drainResult, error) {
	n := b.o.events
	s, err := b.createSchema(ctx)
	if err != nil {
		return drainResult{}, err
	}
	defer s.drop()
	pool, err := newPool(ctx, b.o.dsn, 2)
	if err != nil {
		return drainResult{}, err
	}
	defer pool.Close()
	sink := &wmSink{}
	fwd, err := watermillForwarder(ctx, s, pool, batch, sink)
	if err != nil {
		return drainResult{}, err
	}
	if err := preloadWatermill(ctx, s, n); err != nil {
		return drainResult{}, err
	}
	var lastOffset int64
	if err := s.pool.QueryRow(ctx, `SELECT max("offset") FROM `+s.table("watermill_"+watermillTopic)).Scan(&lastOffset); err != nil {
		return drainResult{}, err
	}

	meter, err := newCPUMeter(ctx, pool)
	if err != nil {
		return drainResult{}, err
	}
	stopProf := startProfile(profile)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- fwd.Run(rctx) }()
	deadline := time.Now().Add(drainTimeout(n))
	acked := int64(0)
	var waitErr error
	// The sink and the offsets table are polled: Watermill has no hook
	// after its acknowledgement commits. A 1 ms tick costs the database one
	// primary-key read per millisecond once the sink is full, and adds at
	// most a millisecond to a drain of seconds.
	tick := time.NewTicker(time.Millisecond)
	for waitErr == nil {
		if sink.n.Load() >= int64(n) {
			err := s.pool.QueryRow(ctx, `SELECT COALESCE(max(offset_acked), 0) FROM `+s.table("watermill_offsets_"+watermillTopic)).Scan(&acked)
			if err != nil {
				waitErr = err
				break
			}
			if acked >= lastOffset {
				break
			}
		}
		if time.Now().After(deadline) {
			waitErr = fmt.Errorf("watermill drain timed out with %d of %d messages at the sink", sink.n.Load(), n)
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			waitErr = ctx.Err()
		case err := <-runErr:
			waitErr = fmt.Errorf("watermill forwarder stopped: %v", err)
		}
	}
	tick.Stop()
	elapsed := time.Since(start)
	procCPU, dbCPU := meter.stop()
	stopProf()
	closeErr := fwd.Close()
	cancel()
	if waitErr != nil {
		return drainResult{}, waitErr
	}
	if closeErr != nil && !errors.Is(closeErr, context.Canceled) {
		return drainResult{}, fmt.Errorf("close forwarder: %w", closeErr)
	}
	got := sink.n.Load()
	return drainResult{seconds: elapsed.Seconds(), procCPU: perEvent(procCPU, n), dbCPU: perEvent(dbCPU, n), check: Check{OK: got == int64(n) && acked >= lastOffset,
		Detail: fmt.Sprintf("sink received %d of %d, offset acked %d of %d", got, n, acked, lastOffset)}}, nil
}
