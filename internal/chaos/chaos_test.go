package chaos_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// faultKind is one kind of injected fault.
type faultKind int

const (
	faultKillRelay    faultKind = iota // SIGKILL a relay at a random moment
	faultTerminate                     // pg_terminate_backend on every relay connection, LISTEN included
	faultRefuse                        // transport down: connection refused
	faultStorm                         // transport answers 503, a few after accepting (lost answers)
	faultKillConsumer                  // SIGKILL the consumer at a random moment
	faultRestartPG                     // PostgreSQL restart, immediate mode (long suite only)
)

func (f faultKind) String() string {
	return [...]string{"kill-relay", "terminate-backends", "transport-refused", "transport-503-storm", "kill-consumer", "restart-postgres"}[f]
}

// scenario describes a chaos run.
type scenario struct {
	relays     int
	batch      int
	rate       int           // events per second
	faultEvery time.Duration // pause between faults
	outage     time.Duration // length of a transport outage or storm
	// schedule is played in order once (short) or, shuffled, until
	// duration has passed (long).
	schedule []faultKind
	duration time.Duration
	// pgRestarts are spread evenly over duration (long suite only).
	pgRestarts int
	// selfKill is the chance that a relay incarnation SIGKILLs itself right
	// after an accepted publish (its 5th to 25th), before settling it.
	selfKill float64
	// The consumer crashes (SIGKILL) or drops its connection after
	// committing, for about one applied event in n.
	consumerCrashEvery, hijackEvery uint64
	drainTimeout                    time.Duration
	// bouncer runs the writers and relays through PgBouncer
	// (envConfig.bouncer).
	bouncer bool
	// producers is how many producers share rate (default 1); relayArgs
	// are extra flags of every relay start; observe, when set, runs from
	// the first fault until production stops (the soak's sampler).
	producers  int
	deliveries int // qstashdev's delivery workers (envConfig.deliveries)
	relayArgs  []string
	observe    func(ctx context.Context, e *env)
	onStats    func(relay int, line string) // env.onStats
	// partitions migrates the tables with this layout (envConfig).
	partitions postgres.Partitioning
}

// tally counts the faults injected.
type tally struct {
	relayKills, terminateRounds, backendsEnded int
	outages, storms, consumerKills, pgRestarts int
	listenerReconnects                         []time.Duration
	// slotsAtKill counts the replication slots killed relays held.
	slotsAtKill int
}

func TestChaosShort(t *testing.T) {
	if *long {
		t.Skip("-long given: TestChaosLong runs instead")
	}
	runScenario(t, scenario{
		relays: 2, batch: 20, rate: 100, faultEvery: 1200 * time.Millisecond, outage: 1500 * time.Millisecond,
		schedule: []faultKind{faultKillRelay, faultTerminate, faultRefuse, faultKillRelay, faultStorm, faultKillConsumer, faultTerminate},
		selfKill: 0.5, consumerCrashEvery: 400, hijackEvery: 100, drainTimeout: 40 * time.Second,
	})
}

// The short run with the writers and the relays behind PgBouncer in
// transaction mode (pools from postgres.NewPool, migrations through it
// too) and the relays' wake-ups past it: every promise holds there as
// directly.
func TestChaosShortThroughPgBouncer(t *testing.T) {
	if *long {
		t.Skip("-long given: TestChaosLong runs instead")
	}
	runScenario(t, scenario{
		relays: 2, batch: 20, rate: 100, faultEvery: 1200 * time.Millisecond, outage: 1500 * time.Millisecond,
		schedule: []faultKind{faultKillRelay, faultTerminate, faultRefuse, faultStorm, faultKillConsumer},
		selfKill: 0.5, consumerCrashEvery: 400, hijackEvery: 100, drainTimeout: 40 * time.Second,
		bouncer: true,
	})
}

func TestChaosLong(t *testing.T) {
	if !*long || testing.Short() {
		t.Skip("the long chaos suite runs for minutes and restarts PostgreSQL: make chaos (go test -run Long ./internal/chaos/ -args -long)")
	}
	d := *duration
	if d == 0 {
		d = 4 * time.Minute
	}
	runScenario(t, scenario{
		relays: 3, batch: 20, rate: 150, faultEvery: 1500 * time.Millisecond, outage: 3 * time.Second,
		schedule: []faultKind{faultKillRelay, faultKillRelay, faultTerminate, faultRefuse, faultStorm, faultKillConsumer, faultTerminate},
		duration: d, pgRestarts: max(1, int(d/(90*time.Second))),
		selfKill: 0.4, consumerCrashEvery: 2000, hijackEvery: 300, drainTimeout: 3 * time.Minute,
	})
}

func runScenario(t *testing.T, sc scenario) {
	s := *seed
	if s == 0 {
		s = rand.Int64()
	}
	t.Logf("fault schedule seed %d (-args -chaos.seed=%d to replay it)", s, s)
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(s), 0))
	rnd := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }
	chance := func(p float64) bool { rngMu.Lock(); defer rngMu.Unlock(); return rng.Float64() < p }

	start := time.Now()
	e := newEnv(t, envConfig{bouncer: sc.bouncer, deliveries: sc.deliveries, partitions: sc.partitions})
	e.onStats = sc.onStats
	e.startConsumer("-crash-every", strconv.FormatUint(sc.consumerCrashEvery, 10), "-hijack-every", strconv.FormatUint(sc.hijackEvery, 10))
	for i := range sc.relays {
		e.startRelay(i, func(n int) []string {
			args := append([]string{"-batch", strconv.Itoa(sc.batch), "-concurrency", "1"}, sc.relayArgs...)
			if (n == 0 && sc.duration == 0) || chance(sc.selfKill) {
				args = append(args, "-crash-after", strconv.Itoa(5+rnd(21)))
			}
			return args
		})
	}

	ctx := context.Background()
	prodCtx, stopProducing := context.WithCancel(ctx)
	producers := max(sc.producers, 1)
	prod := &producer{e: e, rate: sc.rate / producers, unknownEvery: 97, rollbackEvery: 10}
	prodDone := make(chan struct{})
	var prodWG sync.WaitGroup
	for range producers {
		prodWG.Add(1)
		go func() { defer prodWG.Done(); prod.run(prodCtx) }()
	}
	go func() { prodWG.Wait(); close(prodDone) }()
	defer func() { stopProducing(); <-prodDone }()

	slots := newSlotWatch(e)
	wal, err := slots.walLogical(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); slots.run(watchCtx) }()
	defer func() { stopWatching(); <-watchDone }()

	var tl tally
	inject := func(f faultKind) {
		t.Logf("%6.1fs %s", time.Since(start).Seconds(), f)
		switch f {
		case faultKillRelay:
			i := rnd(len(e.relays))
			held, err := slots.sample(ctx, i)
			if err != nil {
				t.Errorf("replication slots of relay %d: %v", i, err)
			}
			if e.relays[i].kill() {
				tl.relayKills++
				slots.waitGone(t, held, "relay "+strconv.Itoa(i)+" SIGKILLed")
				tl.slotsAtKill += len(held)
			}
		case faultKillConsumer:
			if e.consumer.kill() {
				tl.consumerKills++
			}
		case faultTerminate:
			names := make([]string, len(e.relays))
			for i := range e.relays {
				names[i] = e.relayAppName(i)
			}
			since := time.Now()
			var n int
			// Retried: after a database restart the pool may first hand out
			// a connection that died with it.
			err := waitUntil(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
				var err error
				n, err = e.terminateBackends(ctx, names...)
				return err == nil, err
			})
			if err != nil {
				t.Fatalf("pg_terminate_backend: %v", err)
			}
			tl.terminateRounds++
			tl.backendsEnded += n
			e.waitListeners(&tl, since, names)
		case faultRefuse:
			e.proxy.refuse()
			hold(ctx, sc.outage)
			e.proxy.up(t)
			tl.outages++
		case faultStorm:
			e.proxy.startStorm(10, 3)
			hold(ctx, sc.outage)
			e.proxy.up(t)
			tl.storms++
		case faultRestartPG:
			since := time.Now()
			restartPostgres(t)
			tl.pgRestarts++
			names := make([]string, len(e.relays))
			for i := range e.relays {
				names[i] = e.relayAppName(i)
			}
			e.waitListeners(&tl, since, names)
		}
	}

	if sc.observe != nil {
		obsDone := make(chan struct{})
		go func() { defer close(obsDone); sc.observe(prodCtx, e) }()
		defer func() { stopProducing(); <-obsDone }()
	}
	hold(ctx, sc.faultEvery) // let the flow settle in first
	if sc.duration == 0 {
		for _, f := range sc.schedule {
			inject(f)
			hold(ctx, sc.faultEvery)
		}
	} else {
		restartAt := make([]time.Duration, sc.pgRestarts)
		for i := range restartAt {
			restartAt[i] = sc.duration * time.Duration(i+1) / time.Duration(sc.pgRestarts+1)
		}
		for time.Since(start) < sc.duration {
			order := append([]faultKind(nil), sc.schedule...)
			rngMu.Lock()
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			rngMu.Unlock()
			for _, f := range order {
				if len(restartAt) > 0 && time.Since(start) >= restartAt[0] {
					restartAt = restartAt[1:]
					f = faultRestartPG
				}
				inject(f)
				hold(ctx, sc.faultEvery+time.Duration(rnd(1000))*time.Millisecond)
				if time.Since(start) >= sc.duration {
					break
				}
			}
		}
	}
	if sc.bouncer {
		if err := e.relaysBehindBouncer(ctx); err != nil {
			t.Errorf("the relays are not PgBouncer's clients: %v", err)
		}
	}
	stopProducing()
	<-prodDone
	produced := time.Since(start)

	// Everything committed must now reach its end: applied, or (unknown
	// types) dead-lettered by QStash; nothing pending in the outbox.
	err = waitUntil(ctx, sc.drainTimeout, func(ctx context.Context) (bool, error) {
		o, err := e.check(ctx, nil)
		return o.pending == 0 && o.lost == 0 && o.unknownMissed == 0, err
	})
	if err != nil {
		t.Errorf("the run did not settle within %s: %v", sc.drainTimeout, err)
	}
	idleCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := e.qs.WaitIdle(idleCtx); err != nil {
		t.Errorf("qstashdev still busy: %v", err)
	}
	cancel()
	stopWatching()
	<-watchDone
	e.stopWorkers()
	// With WAL wake-ups (wal_level = logical, as CI runs the server) every
	// relay streamed from a temporary slot; none may outlive its relay.
	seen := slots.all()
	t.Logf("WAL wake-ups: wal_level logical %v, %d replication slots seen, %d held by relays at their SIGKILL", wal, len(seen), tl.slotsAtKill)
	if wal && len(seen) == 0 {
		t.Error("wal_level is logical but no relay streamed WAL wake-ups from a slot")
	}
	slots.waitGone(t, seen, "every relay stopped")

	o, err := e.check(ctx, prod.rolledBack())
	if err != nil {
		t.Fatal(err)
	}
	attempted, failed := prod.counts()

	// Redelivery bounds: a relay crash (SIGKILL, its connections ended, a
	// database restart, an answer lost in the transport) republishes at
	// most its one batch in flight (Concurrency 1); a consumer crash
	// redelivers at most what it had in flight (qstashdev's workers); a
	// dropped connection, one event.
	var relayKills, relaySelf int
	for _, p := range e.relays {
		st := p.stats()
		relayKills += st.externalKills
		relaySelf += st.selfKills
	}
	cst := e.consumer.stats()
	ps := e.proxy.stats()
	relayCrashes := relayKills + relaySelf + tl.terminateRounds*sc.relays + tl.pgRestarts*sc.relays + ps.lost
	consumerCrashes := cst.externalKills + cst.selfKills + tl.pgRestarts
	hijacks := int(e.hijacks.Load())
	republishBound := sc.batch * relayCrashes
	redeliveryBound := republishBound + e.deliveries*consumerCrashes + hijacks
	crashes := relayCrashes + consumerCrashes + hijacks

	t.Logf("summary: events=%d crashes=%d redeliveries=%d (bound %d) lost=%d double-effects=%d",
		o.committed, crashes, o.redeliveries, redeliveryBound, o.lost, o.doubles)
	t.Logf("detail: relay SIGKILLs %d external + %d after publish; backend terminations %d rounds (%d connections); "+
		"postgres restarts %d; transport outages %d, 503 storms %d (%d answers lost, %d refused); "+
		"consumer SIGKILLs %d external + %d after commit, connections dropped after commit %d; "+
		"republished %d (bound %d); settle failures seen %d, leases lost %d; listener reconnects %v",
		relayKills, relaySelf, tl.terminateRounds, tl.backendsEnded, tl.pgRestarts, tl.outages, tl.storms, ps.lost, ps.answered5,
		cst.externalKills, cst.selfKills, hijacks, o.republished, republishBound, e.settleFailed.Load(), e.leaseLost.Load(), tl.listenerReconnects)
	t.Logf("detail: %d transactions attempted in %s (%d failed, %d rolled back on purpose), %d committed: %d applied, %d unknown-type dead-lettered by QStash; outbox dead letters %d, pending %d",
		attempted, produced.Round(time.Millisecond), failed, o.rolledBack, o.committed, o.applied, o.unknownDone, o.outboxDead, o.pending)

	for _, p := range o.problems() {
		t.Error(p)
	}
	if o.outboxDead != 0 {
		t.Errorf("%d healthy events dead-lettered in the outbox", o.outboxDead)
	}
	if o.republished > republishBound {
		t.Errorf("%d events republished, more than one batch (%d) per relay crash (%d)", o.republished, sc.batch, relayCrashes)
	}
	if o.redeliveries > redeliveryBound {
		t.Errorf("%d redeliveries, above the bound %d", o.redeliveries, redeliveryBound)
	}
	if o.committed < attempted/2 {
		t.Errorf("only %d of %d transactions committed: the producer did not keep its rate", o.committed, attempted)
	}
	// Faults that did not happen prove nothing.
	if relayKills+relaySelf == 0 || tl.terminateRounds == 0 || ps.refusals == 0 || ps.answered5 == 0 || cst.selfKills+cst.externalKills == 0 || hijacks == 0 {
		t.Errorf("not every fault was injected: relay kills %d+%d, terminations %d, outages %d, 503s %d, consumer kills %d+%d, hijacks %d",
			relayKills, relaySelf, tl.terminateRounds, ps.refusals, ps.answered5, cst.externalKills, cst.selfKills, hijacks)
	}
	if t.Failed() {
		return
	}
	selfTestChecker(t, e, o)
}

// waitListeners waits until every relay has had a wake-up connection again
// that started after since (not necessarily all at the same moment), and
// records how long that took.
//
// A relay's WAL stream may be paused rather than lost: it stays closed
// for a while when the database writes WAL faster than is worth decoding
// (a minute; other test packages writing at the same time reach that
// rate) or when events flow without it. The relay logs each pause with
// its length, and the wait is counted from the end of the latest one.
func (e *env) waitListeners(tl *tally, since time.Time, names []string) {
	e.t.Helper()
	// 45 s: a relay's wake-up connection backs off after repeated
	// failures, and under load its slot takes long to create: a new
	// logical slot waits for every transaction running when it started
	// (20 s failed twice on a loaded machine; the reconnects measured are
	// 0.1-0.3 s).
	const reconnect = 45 * time.Second
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	back := map[string]bool{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		seen, err := e.listening(ctx, since, names...)
		cancel()
		for _, name := range seen {
			back[name] = true
		}
		if len(back) == len(names) {
			break
		}
		if err != nil {
			last = err
		}
		from := since
		if time.Since(since) > reconnect {
			// Overdue, unless a relay paused meanwhile: only then are
			// the logs read.
			for _, r := range e.relays {
				if until := r.wakeupPausedUntil(); until.After(from) {
					from = until
				}
			}
		}
		if time.Since(from) > reconnect {
			e.t.Errorf("relay listeners did not reconnect within %v of the fault or of their last pause (%d of %d back; last error: %v)\n%s",
				reconnect, len(back), len(names), last, e.wakeupReport(since, names))
			return
		}
		<-tick.C
	}
	tl.listenerReconnects = append(tl.listenerReconnects, time.Since(since).Round(10*time.Millisecond))
}

// selfTestChecker proves the checks can fail: it breaks the run's data the
// way a lost event, a double effect and a phantom publish would, and expects
// check to see each.
func selfTestChecker(t *testing.T, e *env, clean outcome) {
	t.Helper()
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("self-test: %v", err)
		}
	}
	// A lost event: one effect (and its processed record) disappears.
	exec(`WITH d AS (DELETE FROM ` + e.table("effects") + ` WHERE event_id = (SELECT event_id FROM ` + e.table("effects") + ` LIMIT 1) RETURNING event_id)
		DELETE FROM ` + e.table("outbox_events_processed") + ` WHERE event_id IN (SELECT event_id FROM d)`)
	// A double effect.
	exec(`UPDATE ` + e.table("effects") + ` SET applied = 2 WHERE event_id = (SELECT event_id FROM ` + e.table("effects") + ` LIMIT 1)`)
	// An event written without its order (as if its transaction had rolled
	// back), still pending.
	exec(`INSERT INTO ` + e.table("outbox_events") + ` (event_type, payload) VALUES ('order.placed', '{}')`)
	o, err := e.check(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.lost != clean.lost+1 || o.doubles != clean.doubles+1 || o.phantoms != clean.phantoms+1 || o.pending != clean.pending+1 || len(o.problems()) < 4 {
		t.Fatalf("the checker missed injected faults: %+v, problems %q", o, o.problems())
	}
}

// restartPostgres restarts the local cluster in immediate mode (no
// checkpoint, every connection cut) and waits until it answers again.
func restartPostgres(t *testing.T) {
	t.Helper()
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) != 1 {
		t.Fatalf("find the PostgreSQL cluster in /etc/postgresql: %v (%d versions)", err, len(versions))
	}
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", versions[0].Name(), "main", "restart", "-m", "immediate").CombinedOutput()
	if err != nil {
		t.Fatalf("restart PostgreSQL: %v\n%s", err, out)
	}
}
