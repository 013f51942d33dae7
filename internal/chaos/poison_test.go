package chaos_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// The relays of these tests fail every publish of this type, transiently:
// the event is retried with backoff until MaxAttempts, then dead-lettered.
const poisonType = "chaos.poison"

func poisonRelayArgs(maxAttempts int, backoff, maxBackoff time.Duration, extra ...string) []string {
	return append([]string{
		"-poison-type", poisonType, "-max-attempts", strconv.Itoa(maxAttempts),
		"-backoff", backoff.String(), "-max-backoff", maxBackoff.String(), "-batch", "20", "-concurrency", "2",
	}, extra...)
}

func orderEvents(t *testing.T, n int, typ, aggregate string) []core.Event {
	t.Helper()
	out := make([]core.Event, n)
	for i := range out {
		e, err := core.NewEvent(typ, map[string]int{"order": i})
		if err != nil {
			t.Fatal(err)
		}
		if aggregate != "" {
			e.AggregateType, e.AggregateID = "order", aggregate
		}
		out[i] = e
	}
	return out
}

func uuids(events []core.Event) []pgtype.UUID {
	out := make([]pgtype.UUID, len(events))
	for i, e := range events {
		out[i] = pgtype.UUID{Bytes: e.ID, Valid: true}
	}
	return out
}

// drainRate starts a relay over a backlog that includes healthy, waits
// until every healthy event is published (and, if poison is set, the poison
// event is dead-lettered), stops the relay, and returns the healthy events'
// publish rate measured with the database clock (events per second between
// the first and the last publish).
func drainRate(t *testing.T, e *env, relay int, healthy []core.Event, poison *core.Event) float64 {
	t.Helper()
	ctx := context.Background()
	p := e.startRelay(relay, func(int) []string { return poisonRelayArgs(6, 20*time.Millisecond, 200*time.Millisecond) })
	ids := uuids(healthy)
	err := waitUntil(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		var published int
		var poisonDead bool
		err := e.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM `+e.table("outbox_events")+` WHERE id = ANY($1) AND published_at IS NOT NULL),
			(SELECT $2::uuid IS NULL OR EXISTS (SELECT 1 FROM `+e.table("outbox_events")+` WHERE id = $2 AND dead_at IS NOT NULL))`,
			ids, poisonID(poison)).Scan(&published, &poisonDead)
		return published == len(healthy) && poisonDead, err
	})
	p.stop(10 * time.Second)
	if err != nil {
		t.Fatalf("backlog not drained: %v", err)
	}
	var secs float64
	if err := e.pool.QueryRow(ctx, `SELECT extract(epoch FROM max(published_at) - min(published_at))::float8 FROM `+
		e.table("outbox_events")+` WHERE id = ANY($1)`, ids).Scan(&secs); err != nil {
		t.Fatal(err)
	}
	return float64(len(healthy)) / max(secs, 0.001)
}

func poisonID(e *core.Event) pgtype.UUID {
	if e == nil {
		return pgtype.UUID{}
	}
	return pgtype.UUID{Bytes: e.ID, Valid: true}
}

// TestPoisonEventDoesNotStopTheFlow: one event failing forever is retried
// with backoff, dead-lettered after exactly MaxAttempts, and meanwhile the
// healthy events around it drain at no less than half the rate of the same
// backlog without it (measured in the same run, with the same relay).
func TestPoisonEventDoesNotStopTheFlow(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.startConsumer()
	ctx := context.Background()
	const n = 1500

	measure := func(round int) (without, with float64, poison core.Event) {
		healthy := orderEvents(t, n, "order.placed", "")
		if err := e.addEvents(ctx, kindOK, healthy...); err != nil {
			t.Fatal(err)
		}
		without = drainRate(t, e, 2*round, healthy, nil)

		poison = orderEvents(t, 1, poisonType, "")[0]
		if err := e.addEvents(ctx, "poison", poison); err != nil { // oldest: claimed first
			t.Fatal(err)
		}
		healthy = orderEvents(t, n, "order.placed", "")
		if err := e.addEvents(ctx, kindOK, healthy...); err != nil {
			t.Fatal(err)
		}
		with = drainRate(t, e, 2*round+1, healthy, &poison)
		return without, with, poison
	}
	without, with, poison := measure(0)
	t.Logf("healthy publish rate: %.0f/s without the poison event, %.0f/s with it", without, with)
	if with < without/2 {
		// A shared two-core machine makes any one timing noisy: measure
		// both again and compare the better of each.
		w2, p2, _ := measure(1)
		t.Logf("again: %.0f/s without, %.0f/s with", w2, p2)
		without, with = max(without, w2), max(with, p2)
	}
	if with < without/2 {
		t.Errorf("healthy events flowed at %.0f/s with a poison event, under half of %.0f/s without", with, without)
	}

	var attempts int
	var lastErr string
	var dead bool
	if err := e.pool.QueryRow(ctx, `SELECT attempts, COALESCE(last_error, ''), dead_at IS NOT NULL FROM `+e.table("outbox_events")+` WHERE id = $1`,
		poison.ID.String()).Scan(&attempts, &lastErr, &dead); err != nil {
		t.Fatal(err)
	}
	if !dead || attempts != 6 || !strings.Contains(lastErr, "no route for "+poisonType) {
		t.Errorf("poison event: dead %v after %d attempts (%q); want dead after exactly MaxAttempts (6)", dead, attempts, lastErr)
	}
	if got := e.proxy.acceptedCount(poison.ID); got != 0 {
		t.Errorf("poison event published %d times", got)
	}

	// And every healthy event still reaches the consumer exactly once.
	waitSettled(t, e)
}

// TestPoisonWithOrderingHoldsOnlyItsAggregate: with per-aggregate ordering,
// a poison event at the head of its aggregate holds back that aggregate's
// later events until it is dead-lettered, and no other aggregate waits.
func TestPoisonWithOrderingHoldsOnlyItsAggregate(t *testing.T) {
	e := newEnv(t, envConfig{ordering: true})
	e.startConsumer()
	ctx := context.Background()

	poison := orderEvents(t, 1, poisonType, "hot")[0]
	if err := e.addEvents(ctx, "poison", poison); err != nil {
		t.Fatal(err)
	}
	hot := orderEvents(t, 3, "order.placed", "hot")
	if err := e.addEvents(ctx, kindOK, hot...); err != nil {
		t.Fatal(err)
	}
	var others []core.Event
	for a := range 10 {
		others = append(others, orderEvents(t, 5, "order.placed", fmt.Sprintf("cold%d", a))...)
	}
	if err := e.addEvents(ctx, kindOK, others...); err != nil {
		t.Fatal(err)
	}

	// Six attempts 200ms, then 400ms apart: the poison lives about 1.8s,
	// ages next to the other aggregates' drain of a few batches.
	e.startRelay(0, func(int) []string {
		return poisonRelayArgs(6, 200*time.Millisecond, 400*time.Millisecond, "-ordering")
	})
	waitSettled(t, e)

	var deadAt time.Time
	var attempts int
	if err := e.pool.QueryRow(ctx, `SELECT dead_at, attempts FROM `+e.table("outbox_events")+` WHERE id = $1`, poison.ID.String()).Scan(&deadAt, &attempts); err != nil {
		t.Fatalf("poison event not dead-lettered: %v", err)
	}
	if attempts != 6 {
		t.Errorf("poison dead-lettered after %d attempts, want 6", attempts)
	}
	var othersLast time.Time
	if err := e.pool.QueryRow(ctx, `SELECT max(published_at) FROM `+e.table("outbox_events")+` WHERE id = ANY($1)`, uuids(others)).Scan(&othersLast); err != nil {
		t.Fatal(err)
	}
	if !othersLast.Before(deadAt) {
		t.Errorf("other aggregates' last publish at %s, not before the poison's dead-lettering at %s: they waited", othersLast, deadAt)
	}
	rows, err := e.pool.Query(ctx, `SELECT sequence, published_at FROM `+e.table("outbox_events")+` WHERE id = ANY($1) ORDER BY sequence`, uuids(hot))
	if err != nil {
		t.Fatal(err)
	}
	prev := deadAt
	for rows.Next() {
		var seq int64
		var at time.Time
		if err := rows.Scan(&seq, &at); err != nil {
			t.Fatal(err)
		}
		if !at.After(prev) {
			t.Errorf("hot aggregate's event %d published at %s, not after %s (the poison's dead-lettering, then its predecessor)", seq, at, prev)
		}
		prev = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("poison dead-lettered %s after the other aggregates drained; its aggregate followed in order",
		deadAt.Sub(othersLast).Round(time.Millisecond))
}

// waitSettled waits until nothing is pending in the outbox and every
// committed healthy event is applied, stops the workers, and checks the
// effects.
func waitSettled(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	if err := waitUntil(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		o, err := e.check(ctx, nil)
		return o.pending == 0 && o.lost == 0, err
	}); err != nil {
		t.Errorf("not settled: %v", err)
	}
	idle, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.qs.WaitIdle(idle); err != nil {
		t.Errorf("qstashdev still busy: %v", err)
	}
	e.stopWorkers()
	o, err := e.check(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range o.problems() {
		t.Error(p)
	}
}
