package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The idle workload: what a relay with nothing to relay costs PostgreSQL.
// Most relays are idle most of the time, so this is the figure a user
// with many services pays per service. The relay runs with outboxkit's
// defaults (postgres.Config and core.RelayConfig left zero, so the store
// streams WAL wake-ups where wal_level is logical) on a freshly migrated,
// empty outbox; once it has claimed once and its wake-up connection is
// up, the CPU time of every backend it opened (the pool's and the
// wake-up connection's, found by application_name) is measured over
// -idle-duration.

// System names of the idle variants besides sysDefaults.
const (
	sysIdleListen = "outboxkit WakeupListen"
	sysIdlePoll   = "outboxkit WakeupPoll"
)

// idleVariant is one idle relay: the store's defaults but for Wakeup.
type idleVariant struct {
	sys    string
	wakeup postgres.WakeupMode
}

var idleVariants = []idleVariant{
	{sysDefaults, postgres.WakeupAuto},
	{sysIdleListen, postgres.WakeupListen},
	{sysIdlePoll, postgres.WakeupPoll},
}

// Wake-up connections an idle relay may hold.
const (
	wakeupWAL    = "WAL stream"
	wakeupListen = "LISTEN"
	wakeupNone   = "none"
)

// idlePoolConns is pgxpool's default MaxConns on a 2-core machine
// (max(4, NumCPU)); the pool opens them all before the relay starts, so
// none connects during the measurement.
const idlePoolConns = 4

// idleReadyTimeout bounds the wait for the relay's first claim and its
// wake-up connection. Creating a replication slot waits for the
// transactions running at that moment, up to ~15 s on a busy server.
const idleReadyTimeout = time.Minute

// idleResult is one idle measurement.
type idleResult struct {
	pgPercent   float64 // CPU of the relay's backends, % of one core
	procPercent float64 // CPU of this process, % of one core
	acquires    float64 // connections the store took from its pool, per second
	walMiBps    float64 // WAL the whole server wrote meanwhile, MiB/s
	wakeup      string  // the wake-up connection found before the measurement
	check       Check
}

// idleCase is the idle workload's case in the tables.
func (b *bench) idleCase() string {
	return fmt.Sprintf("empty outbox, %s", b.o.idleFor)
}

func (b *bench) runIdle(ctx context.Context) error {
	cas := b.idleCase()
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("idle workload: a relay with core.RelayConfig and postgres.Config defaults (Wakeup set for the WakeupListen and WakeupPoll rows) "+
		"on an empty outbox, a pool of %d connections opened up front; after its first claim and with its wake-up connection up, the CPU time of every backend "+
		"with its application_name (pool and wake-up connection) over %s, as %% of one core; the bench process's CPU is the relay's plus the harness's once-a-second sampling", idlePoolConns, b.o.idleFor))
	for rep := 0; rep < b.o.reps; rep++ {
		for _, v := range rotate(idleVariants, rep) {
			res, err := attempt(ctx, b, fmt.Sprintf("idle %s rep %d", v.sys, rep+1), func() (idleResult, error) {
				return b.idleRelay(ctx, v)
			})
			if err != nil {
				return fmt.Errorf("%s: %w", v.sys, err)
			}
			b.logf("idle %s rep %d: PostgreSQL %.3f %% of a core, bench process %.3f %%, %.2f pool acquires/s, wake-up: %s, server WAL %.2f MiB/s",
				v.sys, rep+1, res.pgPercent, res.procPercent, res.acquires, res.wakeup, res.walMiBps)
			b.rep.add("idle", cas, v.sys, "PG CPU % of one core", res.pgPercent)
			b.rep.add("idle", cas, v.sys, "bench process CPU % of one core", res.procPercent)
			b.rep.add("idle", cas, v.sys, "pool acquires/s", res.acquires)
			b.rep.add("idle", cas, v.sys, "server WAL MiB/s (all writers)", res.walMiBps)
			if v.wakeup == postgres.WakeupAuto && res.wakeup != wakeupWAL {
				b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("idle %s rep %d: the store's wake-up was %s, not the WAL stream (see its log)", v.sys, rep+1, res.wakeup))
			}
			res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "idle", cas, v.sys, rep+1
			b.rep.check(res.check)
		}
	}
	return nil
}

// idleRelay runs one idle relay and measures it.
func (b *bench) idleRelay(ctx context.Context, v idleVariant) (idleResult, error) {
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return idleResult{}, err
	}
	defer s.drop()
	// The wake-up connection is opened with the pool's settings, so it
	// carries the same application_name.
	app := "outboxkit-bench-idle-" + s.name
	pool, err := newPool(ctx, b.o.dsn, idlePoolConns, "application_name", app)
	if err != nil {
		return idleResult{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Schema: s.name, Wakeup: v.wakeup})
	if err != nil {
		return idleResult{}, err
	}
	sink := &countSink{}
	relay, err := core.NewRelay(store, sink, &core.RelayConfig{})
	if err != nil {
		return idleResult{}, err
	}
	acq0 := pool.Stat().AcquireCount()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- relay.Run(rctx) }()
	// stopRelay stops the relay and waits for it, once: on the way out
	// of every path, before the pool closes.
	stopped := false
	stopRelay := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("relay: %w", err)
		}
		return nil
	}
	defer stopRelay() //nolint:errcheck // only reached first on an error path
	wk, err := waitIdleReady(ctx, b.admin, pool, acq0, app, v.wakeup, runErr)
	if err != nil {
		return idleResult{}, err
	}

	meter, err := newAppCPUMeter(ctx, b.admin, app)
	if err != nil {
		return idleResult{}, err
	}
	atStart := meter.backends()
	unreadable := 0
	for pid := range meter.start {
		if _, ok := pidCPU(pid); !ok {
			unreadable++
		}
	}
	// The server's WAL over the window, whoever wrote it: a WAL sender
	// decodes all of it, so the stream's cost follows it.
	var lsn0 string
	if err := b.admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn0); err != nil {
		return idleResult{}, fmt.Errorf("WAL position: %w", err)
	}
	acq1 := pool.Stat().AcquireCount()
	start := time.Now()
	window := time.NewTimer(b.o.idleFor)
	defer window.Stop()
	// Samples let a backend that disconnects during the window (a WAL
	// stream that pauses) be counted up to its last second.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var waitErr error
wait:
	for {
		select {
		case <-window.C:
			break wait
		case <-tick.C:
			if err := meter.sample(ctx); err != nil {
				waitErr = err
				break wait
			}
		case err := <-runErr:
			runErr <- err // for stopRelay
			waitErr = fmt.Errorf("the idle relay stopped: %v", err)
			break wait
		case <-ctx.Done():
			waitErr = ctx.Err()
			break wait
		}
	}
	elapsed := time.Since(start)
	procCPU, dbCPU := meter.stop()
	acquires := pool.Stat().AcquireCount() - acq1
	var walBytes float64
	if err := b.admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8", lsn0).Scan(&walBytes); err != nil && waitErr == nil {
		waitErr = fmt.Errorf("WAL position: %w", err)
	}
	wkEnd, _, err := wakeupOf(ctx, b.admin, app)
	if err != nil && waitErr == nil {
		waitErr = err
	}
	if err := stopRelay(); err != nil && waitErr == nil {
		waitErr = err
	}
	if waitErr != nil {
		return idleResult{}, waitErr
	}

	res := idleResult{
		pgPercent:   100 * dbCPU.Seconds() / elapsed.Seconds(),
		procPercent: 100 * procCPU.Seconds() / elapsed.Seconds(),
		acquires:    float64(acquires) / elapsed.Seconds(),
		walMiBps:    walBytes / (1 << 20) / elapsed.Seconds(),
		wakeup:      wk,
	}
	// The expected connections: the pool's, plus the wake-up connection
	// unless the relay polls only.
	wantWakeup := map[postgres.WakeupMode][]string{
		postgres.WakeupAuto:   {wakeupWAL, wakeupListen},
		postgres.WakeupListen: {wakeupListen},
		postgres.WakeupPoll:   {wakeupNone},
	}[v.wakeup]
	wantBackends := idlePoolConns + 1
	if v.wakeup == postgres.WakeupPoll {
		wantBackends = idlePoolConns
	}
	okWakeup := false
	for _, w := range wantWakeup {
		okWakeup = okWakeup || w == wk
	}
	got := sink.n.Load()
	res.check = Check{
		OK: okWakeup && atStart == wantBackends && unreadable == 0 && got == 0,
		Detail: fmt.Sprintf("wake-up %s at the start (want one of %v), %s at the end; %d backends at the start (want %d), %d seen in all, %d whose CPU time /proc does not show; %d events published",
			wk, wantWakeup, wkEnd, atStart, wantBackends, meter.backends(), unreadable, got),
	}
	return res, nil
}

// waitIdleReady waits until the relay has run a claim (its pool handed
// out a connection after the warm-up, and has it back) and, unless it
// polls only, its wake-up connection is up: a WAL sender streaming
// (pg_stat_replication), or a session whose last statement was LISTEN.
// It returns which wake-up it found.
func waitIdleReady(ctx context.Context, admin, pool *pgxpool.Pool, acq0 int64, app string, mode postgres.WakeupMode, runErr chan error) (string, error) {
	deadline := time.Now().Add(idleReadyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st := pool.Stat()
		claimed := st.AcquireCount() > acq0 && st.AcquiredConns() == 0
		wk, n, err := wakeupOf(ctx, admin, app)
		if err != nil {
			return "", err
		}
		if claimed && (mode == postgres.WakeupPoll || wk != wakeupNone) {
			return wk, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("idle relay (%s) not ready after %s: claimed %v, wake-up %s, %d backends named %s", mode, idleReadyTimeout, claimed, wk, n, app)
		}
		select {
		case <-tick.C:
		case err := <-runErr:
			runErr <- err
			return "", fmt.Errorf("the idle relay stopped before it was ready: %v", err)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// wakeupOf says which wake-up connection the backends named app hold,
// and how many backends there are.
func wakeupOf(ctx context.Context, admin *pgxpool.Pool, app string) (string, int, error) {
	var wal, listen bool
	var n int
	err := admin.QueryRow(ctx, `SELECT COALESCE(bool_or(r.state = 'streaming'), false),
	COALESCE(bool_or(a.backend_type = 'client backend' AND a.state = 'idle' AND a.query ILIKE 'LISTEN %'), false),
	count(*)
FROM pg_stat_activity a LEFT JOIN pg_stat_replication r ON r.pid = a.pid
WHERE a.application_name = $1`, app).Scan(&wal, &listen, &n)
	if err != nil {
		return "", 0, fmt.Errorf("backends of %s: %w", app, err)
	}
	switch {
	case wal:
		return wakeupWAL, n, nil
	case listen:
		return wakeupListen, n, nil
	}
	return wakeupNone, n, nil
}
