package outboxkafka_test

import (
	"slices"
	"testing"
	"time"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/kafkatest"
)

// TestRelayKeepsEachAggregatesOrder: three relays share a PostgreSQL
// outbox with per-aggregate ordering on and publish 60 aggregates × 8
// events to a six-partition topic; every aggregate's records, read in
// partition order, are its sequences 1..8, once each.
func TestRelayKeepsEachAggregatesOrder(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, 3, 6)
	topic := newTopic("ordered")
	col := kafkatest.Collect(t, c.Seeds(), topic)
	pool, store := newStore(t, true)
	const aggregates, per = 60, 8
	written := write(t, pool, store, aggregates, per)

	for range 3 {
		pub, err := outboxkafka.NewPublisher(newClient(t, c), &outboxkafka.PublisherConfig{
			Topic: func(core.Event) string { return topic },
		})
		if err != nil {
			t.Fatal(err)
		}
		runRelay(t, store, pub, &core.RelayConfig{BatchSize: 25, Concurrency: 2, PollInterval: 20 * time.Millisecond})
	}
	if err := col.WaitFor(waitCtx(t, 60*time.Second), len(written)); err != nil {
		t.Fatal(err)
	}
	st := drained(t, store, 10*time.Second)
	if st.DeadLettered != 0 {
		t.Fatalf("%d dead letters", st.DeadLettered)
	}
	checkOrder(t, col, aggregates, per)
}

// checkOrder checks that each aggregate's records, in arrival order
// (offset order on its one partition), carry sequences 1..per: once each,
// or, where a batch was published again, with the repeats after their
// first copy (the order of first copies is the sequence order).
func checkOrder(t *testing.T, col *kafkatest.Collector, aggregates, per int) {
	t.Helper()
	seqs := map[string][]int64{}
	parts := map[string]map[int32]bool{}
	for _, r := range col.Records() {
		e, err := outboxkafka.EventFromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		s := seqs[e.AggregateID]
		if slices.Contains(s, e.Sequence) {
			continue // a republish: its first copy has its place
		}
		seqs[e.AggregateID] = append(s, e.Sequence)
		if parts[e.AggregateID] == nil {
			parts[e.AggregateID] = map[int32]bool{}
		}
		parts[e.AggregateID][r.Partition] = true
	}
	if len(seqs) != aggregates {
		t.Fatalf("%d aggregates arrived, want %d", len(seqs), aggregates)
	}
	for agg, s := range seqs {
		if len(parts[agg]) != 1 {
			t.Errorf("aggregate %s spread over partitions %v", agg, parts[agg])
		}
		if len(s) != per {
			t.Errorf("aggregate %s: sequences %v, want 1..%d once each", agg, s, per)
			continue
		}
		for i, q := range s {
			if q != int64(i+1) {
				t.Errorf("aggregate %s arrived in the order %v", agg, s)
				break
			}
		}
	}
}

// TestBrokerKilledMidRunLosesNothing: two relays drain 3,000 events
// while a broker is killed (its connections cut, its partitions led by
// the others) after a third has arrived, and brought back after two
// thirds; then another is killed until the end. Every event arrives, at
// least once, the outbox ends with nothing pending or dead-lettered, and
// with ordering on each aggregate's events still arrive in sequence order.
func TestBrokerKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, 3, 6)
	topic := newTopic("killed")
	col := kafkatest.Collect(t, c.Seeds(), topic)
	pool, store := newStore(t, true)
	const aggregates, per = 150, 20
	written := write(t, pool, store, aggregates, per)

	for range 2 {
		pub, err := outboxkafka.NewPublisher(newClient(t, c), &outboxkafka.PublisherConfig{
			Topic: func(core.Event) string { return topic },
		})
		if err != nil {
			t.Fatal(err)
		}
		runRelay(t, store, pub, &core.RelayConfig{
			BatchSize: 50, Concurrency: 2, PollInterval: 20 * time.Millisecond,
			LeaseDuration: 10 * time.Second, PublishTimeout: 5 * time.Second,
			Retry: core.RetryPolicy{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		})
	}
	ctx := waitCtx(t, 90*time.Second)
	if err := col.WaitFor(ctx, len(written)/3); err != nil {
		t.Fatal(err)
	}
	victim := c.LeaderFor(topic, 0)
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed broker %d (leader of partition 0) at %d records", victim, col.Len())
	if err := col.WaitFor(ctx, 2*len(written)/3); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	second := c.LeaderFor(topic, 1)
	if err := c.Kill(second); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted broker %d, killed broker %d at %d records", victim, second, col.Len())

	// Every event settled means every one had its produce acknowledged.
	st := drained(t, store, 60*time.Second)
	if st.DeadLettered != 0 {
		t.Fatalf("%d dead letters", st.DeadLettered)
	}
	if err := c.Restart(second); err != nil {
		t.Fatal(err)
	}
	// What the topic holds, read by a consumer that saw no fault.
	total, _, err := kafkatest.EndOffsets(ctx, newClient(t, c), topic)
	if err != nil {
		t.Fatal(err)
	}
	final := kafkatest.Collect(t, c.Seeds(), topic)
	if err := final.WaitFor(ctx, int(total)); err != nil {
		t.Fatal(err)
	}
	copies := make(map[core.ID]int, len(written))
	for _, e := range events(t, final.Records()) {
		copies[e.ID]++
	}
	lost := 0
	for _, e := range written {
		if copies[e.ID] == 0 {
			lost++
		}
	}
	dups := int(total) - len(written) + lost
	t.Logf("events %d, records in the topic %d: lost %d, republished %d (the live consumer read %d)", len(written), total, lost, dups, col.Len())
	if lost > 0 {
		t.Fatalf("%d acknowledged events are not in the topic", lost)
	}
	// Republishes come only from batches whose results were lost with a
	// broker: at most the in-flight batches of both relays per kill.
	if bound := 2 * 2 * 2 * 50; dups > bound {
		t.Errorf("%d republished events, more than the %d in flight at the kills", dups, bound)
	}
	checkOrder(t, final, aggregates, per)
}
