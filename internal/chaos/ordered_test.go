package chaos_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// orderedScenario describes a run of the consumer-ordering suite: a
// producer writes aggregates × perAggregate "order.step" events (sequences
// assigned by the store), relays publish them, qstashdev delivers them in
// parallel, and a consumer applies them through a postgres.Sequencer while
// relays and the consumer are killed and the transport fails.
type orderedScenario struct {
	aggregates, perAggregate int
	rate                     int // producer transactions per second, 1 to 4 events each
	relays, batch            int
	// relayOrdering is the relays' Ordering: off, they publish an
	// aggregate's events concurrently and in any order; on, one at a time
	// in sequence order (deliveries can still overtake one another).
	relayOrdering bool
	faultEvery    time.Duration
	outage        time.Duration
	// schedule is played in order at least once, then again until the
	// producer is done.
	schedule []faultKind
	// selfKill is the chance that a relay incarnation SIGKILLs itself
	// right after an accepted publish, before settling it.
	selfKill float64
	// The consumer SIGKILLs itself, or drops its connection, after the
	// effect committed for about one applied event in n; it answers 503
	// before reading about one delivery in failEvery.
	consumerCrashEvery, hijackEvery, failEvery uint64
	// gapTimeout is the Sequencer's GapTimeout under GapPark: a gap
	// lasting longer parks its event, which the run then counts as a
	// failure (nothing is parked on purpose). It is shorter than QStash's
	// retry horizon (100 retries, one per Retry-After), as the Sequencer's
	// documentation asks.
	gapTimeout time.Duration
	// backoffScale is qstashdev's BackoffScale: at 1, a gap's Retry-After
	// of 1 s is honoured as QStash would.
	backoffScale float64
	drainTimeout time.Duration
	// partitions migrates the tables with this layout (envConfig).
	partitions postgres.Partitioning
}

// The short runs are scaled down to stay within a few tens of seconds with
// -race on two cores; the long ones write 200 aggregates × 50 events.
var (
	orderedShort = orderedScenario{
		aggregates: 100, perAggregate: 10, rate: 60, relays: 2, batch: 20,
		faultEvery: 900 * time.Millisecond, outage: 1200 * time.Millisecond,
		schedule: []faultKind{faultKillRelay, faultStorm, faultKillConsumer, faultRefuse, faultKillRelay, faultKillConsumer},
		selfKill: 0.5, consumerCrashEvery: 300, hijackEvery: 80, failEvery: 15,
		gapTimeout: 60 * time.Second, backoffScale: 1, drainTimeout: 90 * time.Second,
	}
	orderedLong = orderedScenario{
		aggregates: 200, perAggregate: 50, rate: 50, relays: 3, batch: 20,
		faultEvery: 1500 * time.Millisecond, outage: 2500 * time.Millisecond,
		schedule: []faultKind{faultKillRelay, faultKillRelay, faultStorm, faultKillConsumer, faultRefuse, faultKillConsumer},
		selfKill: 0.4, consumerCrashEvery: 1500, hijackEvery: 300, failEvery: 15,
		gapTimeout: 60 * time.Second, backoffScale: 1, drainTimeout: 3 * time.Minute,
	}
)

func TestChaosOrdered(t *testing.T) {
	if *long {
		t.Skip("-long given: TestChaosLongOrdered runs instead")
	}
	t.Run("relay-unordered", func(t *testing.T) { runOrdered(t, orderedShort) })
	t.Run("relay-ordered", func(t *testing.T) {
		sc := orderedShort
		sc.relayOrdering = true
		runOrdered(t, sc)
	})
}

func TestChaosLongOrdered(t *testing.T) {
	if !*long || testing.Short() {
		t.Skip("the long ordered suite runs for minutes: make chaos (go test -run Long ./internal/chaos/ -args -long)")
	}
	t.Run("relay-unordered", func(t *testing.T) { runOrdered(t, orderedLong) })
	t.Run("relay-ordered", func(t *testing.T) {
		sc := orderedLong
		sc.relayOrdering = true
		runOrdered(t, sc)
	})
}

func runOrdered(t *testing.T, sc orderedScenario) {
	s := *seed
	if s == 0 {
		s = rand.Int64()
	}
	t.Logf("fault schedule seed %d (-args -chaos.seed=%d to replay it); %d aggregates × %d events, relay ordering %v",
		s, s, sc.aggregates, sc.perAggregate, sc.relayOrdering)
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(s), 1))
	rnd := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }
	chance := func(p float64) bool { rngMu.Lock(); defer rngMu.Unlock(); return rng.Float64() < p }

	start := time.Now()
	ctx := context.Background()
	// The test's store writes with Ordering on, so Add assigns sequences.
	e := newEnv(t, envConfig{ordering: true, backoffScale: sc.backoffScale, partitions: sc.partitions})
	if _, err := e.pool.Exec(ctx, `CREATE TABLE `+e.table("ordered_effects")+` (
			serial bigserial PRIMARY KEY, aggregate_id text NOT NULL, sequence bigint NOT NULL, event_id uuid NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON `+e.table("ordered_effects")+` (aggregate_id, sequence)`); err != nil {
		t.Fatalf("create ordered_effects: %v", err)
	}
	e.startConsumer("-ordered", "-gap-policy", "park", "-gap-timeout", sc.gapTimeout.String(), "-gap-alert-after", "5s",
		"-crash-every", strconv.FormatUint(sc.consumerCrashEvery, 10), "-hijack-every", strconv.FormatUint(sc.hijackEvery, 10),
		"-fail-every", strconv.FormatUint(sc.failEvery, 10))
	for i := range sc.relays {
		e.startRelay(i, func(n int) []string {
			// QStash's most retries (qstashdev's bound): more than
			// gapTimeout's worth of a gap's Retry-After.
			args := []string{"-batch", strconv.Itoa(sc.batch), "-concurrency", "1", "-qstash-retries", "100",
				"-ordering=" + strconv.FormatBool(sc.relayOrdering)}
			if n == 0 || chance(sc.selfKill) {
				args = append(args, "-crash-after", strconv.Itoa(5+rnd(21)))
			}
			return args
		})
	}

	prodCtx, stopProducing := context.WithCancel(ctx)
	prod := newOrderedProducer(e, sc.aggregates, sc.perAggregate, sc.rate, 10, uint64(s))
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); prod.run(prodCtx) }()
	defer func() { stopProducing(); <-prodDone }()

	var tl tally
	inject := func(f faultKind) {
		t.Logf("%6.1fs %s", time.Since(start).Seconds(), f)
		switch f {
		case faultKillRelay:
			if e.relays[rnd(len(e.relays))].kill() {
				tl.relayKills++
			}
		case faultKillConsumer:
			if e.consumer.kill() {
				tl.consumerKills++
			}
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
		default:
			t.Fatalf("fault %s is not part of the ordered suite", f)
		}
	}
	hold(ctx, sc.faultEvery) // let the flow settle in first
	produced := false
	for played := 0; ; played++ {
		f := sc.schedule[played%len(sc.schedule)]
		if played >= len(sc.schedule) {
			select {
			case <-prodDone:
				produced = true
			default:
			}
			if produced {
				break
			}
		}
		inject(f)
		hold(ctx, sc.faultEvery+time.Duration(rnd(300))*time.Millisecond)
	}
	produceTime := time.Since(start)

	total := prod.total()
	err := waitUntil(ctx, sc.drainTimeout, func(ctx context.Context) (bool, error) {
		o, err := e.checkOrdered(ctx, nil)
		return o.pending == 0 && o.effects >= total, err
	})
	if err != nil {
		t.Errorf("the run did not settle within %s: %v", sc.drainTimeout, err)
	}
	idleCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := e.qs.WaitIdle(idleCtx); err != nil {
		t.Errorf("qstashdev still busy: %v", err)
	}
	cancel()
	drainTime := time.Since(start) - produceTime
	e.stopWorkers()

	o, err := e.checkOrdered(ctx, prod.committedCounts())
	if err != nil {
		t.Fatal(err)
	}
	var relayKills, relaySelf int
	for _, p := range e.relays {
		st := p.stats()
		relayKills += st.externalKills
		relaySelf += st.selfKills
	}
	cst := e.consumer.stats()
	ps := e.proxy.stats()
	sq := e.sequencerCounts()
	attempted, failed, rolledBack := prod.counts()
	t.Logf("summary: %d aggregates, %d events, %d effects; out-of-order arrivals (gaps) %d, stale or repeated deliveries %d, "+
		"gap alerts %d, parked %d; delivery 503s %d, publish 503s %d (%d answers lost); relay SIGKILLs %d external + %d after publish, "+
		"consumer SIGKILLs %d external + %d after commit, connections dropped after commit %d; order violations seen by the effect %d",
		o.aggregates, o.events, o.effects, sq.gaps, sq.stale, sq.alerts, sq.parked, sq.failBefore, ps.answered5, ps.lost,
		relayKills, relaySelf, cst.externalKills, cst.selfKills, e.hijacks.Load(), sq.violations)
	t.Logf("detail: %d transactions in %s (%d rolled back on purpose, %d failed), drained in %s; transport outages %d, 503 storms %d; republished %d; qstashdev DLQ %d",
		attempted, produceTime.Round(time.Millisecond), rolledBack, failed, drainTime.Round(time.Millisecond), tl.outages, tl.storms, ps.republished, o.dlq)

	for _, p := range o.problems() {
		t.Error(p)
	}
	if failed != 0 {
		t.Errorf("%d producer transactions failed: their outcome is unknown, so the per-aggregate counts cannot be checked", failed)
	}
	if sq.violations != 0 {
		t.Errorf("the consumer's effect found its predecessor missing %d times", sq.violations)
	}
	if sq.parked != 0 || sq.overGap != 0 {
		t.Errorf("the Sequencer parked %d events and applied %d over a gap; none was meant to", sq.parked, sq.overGap)
	}
	// Adversity that did not happen proves nothing.
	if sq.gaps == 0 || sq.stale == 0 || sq.failBefore == 0 || ps.answered5 == 0 || ps.refusals == 0 ||
		relayKills+relaySelf == 0 || cst.externalKills+cst.selfKills == 0 {
		t.Errorf("not every adversity happened: gaps %d, stale %d, delivery 503s %d, publish 503s %d, outages %d, relay kills %d+%d, consumer kills %d+%d",
			sq.gaps, sq.stale, sq.failBefore, ps.answered5, ps.refusals, relayKills, relaySelf, cst.externalKills, cst.selfKills)
	}
	if t.Failed() {
		return
	}
	selfTestOrdered(t, e, o)
}

// orderedProducer writes every aggregate's perAggregate events, a random
// aggregate per transaction and 1 to 4 of its next events at once, so an
// aggregate's events sit side by side in a relay's batch. Every
// rollbackEvery-th transaction rolls back: its sequences must not leave a
// gap. Each event's payload holds its position in the aggregate ("step"),
// which the store's sequence must equal.
type orderedProducer struct {
	e                                  *env
	aggregates, perAggregate, rate     int
	rollbackEvery                      int
	rng                                *rand.Rand
	mu                                 sync.Mutex
	committed                          []int
	attempted, failed, rolledBackCount int
}

func newOrderedProducer(e *env, aggregates, perAggregate, rate, rollbackEvery int, seed uint64) *orderedProducer {
	return &orderedProducer{
		e: e, aggregates: aggregates, perAggregate: perAggregate, rate: rate, rollbackEvery: rollbackEvery,
		rng: rand.New(rand.NewPCG(seed, 2)), committed: make([]int, aggregates),
	}
}

func aggregateName(i int) string { return "o" + itoa(i) }

// total is the number of events the producer commits in all.
func (p *orderedProducer) total() int { return p.aggregates * p.perAggregate }

func (p *orderedProducer) run(ctx context.Context) {
	open := make([]int, p.aggregates) // aggregates not yet complete
	for i := range open {
		open[i] = i
	}
	tick := time.NewTicker(time.Second / time.Duration(p.rate))
	defer tick.Stop()
	for n := 1; len(open) > 0; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		j := p.rng.IntN(len(open))
		agg := open[j]
		p.mu.Lock()
		done := p.committed[agg]
		p.mu.Unlock()
		k := min(1+p.rng.IntN(4), p.perAggregate-done)
		events := make([]core.Event, k)
		for i := range events {
			ev, err := core.NewEvent("order.step", map[string]any{"aggregate": aggregateName(agg), "step": done + i + 1})
			if err != nil {
				panic(err)
			}
			ev.Source = "chaos/ordered-producer"
			ev.AggregateType, ev.AggregateID = "order", aggregateName(agg)
			events[i] = ev
		}
		rollback := p.rollbackEvery > 0 && n%p.rollbackEvery == 0
		err := p.write(ctx, rollback, events)
		p.mu.Lock()
		p.attempted++
		switch {
		case err != nil:
			p.failed++
		case rollback:
			p.rolledBackCount++
		default:
			p.committed[agg] += k
			if p.committed[agg] == p.perAggregate {
				open[j] = open[len(open)-1]
				open = open[:len(open)-1]
			}
		}
		p.mu.Unlock()
	}
}

func (p *orderedProducer) write(ctx context.Context, rollback bool, events []core.Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	tx, err := p.e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := p.e.store.Add(ctx, tx, events...); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

func (p *orderedProducer) counts() (attempted, failed, rolledBack int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempted, p.failed, p.rolledBackCount
}

// committedCounts maps each aggregate to the events committed for it.
func (p *orderedProducer) committedCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[string]int, len(p.committed))
	for i, n := range p.committed {
		m[aggregateName(i)] = n
	}
	return m
}

// selfTestOrdered proves the ordered checks can fail: it breaks the run's
// data one way at a time (an effect missing, an effect applied twice, two
// effects applied out of order, an event parked, an event left pending) and
// expects checkOrdered to count each.
func selfTestOrdered(t *testing.T, e *env, clean orderedOutcome) {
	t.Helper()
	ctx := context.Background()
	breaks := []struct {
		what  string
		sql   string
		count func(orderedOutcome) int
	}{
		{"an effect missing", `DELETE FROM EFFECTS WHERE aggregate_id = 'o0' AND sequence = 3`,
			func(o orderedOutcome) int { return o.missing }},
		{"an effect applied twice", `INSERT INTO EFFECTS (aggregate_id, sequence, event_id)
			SELECT aggregate_id, sequence, event_id FROM EFFECTS WHERE aggregate_id = 'o1' AND sequence = 2`,
			func(o orderedOutcome) int { return o.duplicates }},
		{"two effects applied out of order", `UPDATE EFFECTS f SET sequence = g.sequence, event_id = g.event_id FROM EFFECTS g
			WHERE f.aggregate_id = 'o2' AND g.aggregate_id = 'o2'
			  AND ((f.sequence = 4 AND g.sequence = 5) OR (f.sequence = 5 AND g.sequence = 4))`,
			func(o orderedOutcome) int { return o.outOfOrder }},
		{"an event parked", `INSERT INTO PARKED (consumer, event_id, event_type, aggregate_type, aggregate_id, sequence, expected, waiting_since, parked_at)
			VALUES ('chaos', gen_random_uuid(), 'order.step', 'order', 'o3', 7, 6, now(), now())`,
			func(o orderedOutcome) int { return o.parked }},
		{"an event pending", `INSERT INTO OUTBOX (event_type, payload) VALUES ('order.step', '{}')`,
			func(o orderedOutcome) int { return o.pending }},
	}
	prev := clean
	for _, b := range breaks {
		if _, err := e.pool.Exec(ctx, e.orderedNames().Replace(b.sql)); err != nil {
			t.Fatalf("self-test, %s: %v", b.what, err)
		}
		o, err := e.checkOrdered(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b.count(o) != b.count(prev)+1 || len(o.problems()) == 0 {
			t.Fatalf("the ordered checker missed %s: before %+v, after %+v, problems %q", b.what, prev, o, o.problems())
		}
		prev = o
	}
	t.Logf("self-test: the checker counted each of %d injected faults", len(breaks))
}
