package chaos_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/kafkatest"
)

// TestPartitionedFromKafkaWhileHoldingLeases cuts relay 0 off from its
// Kafka brokers (every connection of its client blackholed: no reset, no
// error) just before it produces a batch. Its publish must end at the
// publish timeout, inside the lease, reporting the batch failed; relays
// 1 and 2 must then publish those events; nothing may be lost; no event
// may be under two live leases. A produce request relay 0 had on the wire
// when it gave up reaches the broker once the partition heals: those late
// copies are counted, and each must be one of relay 0's produces while cut
// off (consumers deduplicate them by ce_id).
func TestPartitionedFromKafkaWhileHoldingLeases(t *testing.T) {
	t.Parallel()
	w := newPTWorld(t)
	c := kafkatest.New(t, 3, 6)
	topic := "partition-" + randomHex(4)

	gateCtx, stopGates := context.WithCancel(context.Background())
	var gateWG sync.WaitGroup
	t.Cleanup(func() { stopGates(); gateWG.Wait() })
	g := newGate()
	newPub := func(i int) core.Publisher {
		opts := []kgo.Opt{kgo.AllowAutoTopicCreation()}
		if i == 0 {
			opts = append(opts, kgo.Dialer(gatedDialer(gateCtx, g, &gateWG)))
		}
		cl, err := outboxkafka.NewClient(c.Seeds(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		pub, err := outboxkafka.NewPublisher(cl, &outboxkafka.PublisherConfig{Topic: func(core.Event) string { return topic }})
		if err != nil {
			t.Fatal(err)
		}
		return pub
	}

	var (
		mu        sync.Mutex
		triedCut  = map[core.ID]int{} // what relay 0 produced while cut off, and how often
		cutBatch  []core.ID
		cutAt     time.Time
		cutSignal = make(chan struct{})
		calls     atomic.Int32
		cutOnce   sync.Once
		healed    atomic.Bool
	)
	pub0 := newPub(0)
	cutter := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		if calls.Add(1) == 3 {
			cutOnce.Do(func() {
				mu.Lock()
				for _, e := range events {
					cutBatch = append(cutBatch, e.ID)
				}
				mu.Unlock()
				g.cut()
				cutAt = time.Now()
				close(cutSignal)
			})
		}
		if !healed.Load() && calls.Load() >= 3 {
			mu.Lock()
			for _, e := range events {
				triedCut[e.ID]++
			}
			mu.Unlock()
		}
		return pub0.Publish(ctx, events)
	})
	watch := &settleWatch{got: make(chan error, 1)}
	w.preload(600)
	w.startRelay(0, w.pool, cutter, watch)
	for i := 1; i < ptRelays; i++ {
		w.startRelay(i, w.pool, newPub(i))
	}
	prodCtx, stopProducing := context.WithCancel(context.Background())
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); w.produce(prodCtx, 150) }()
	defer func() { stopProducing(); <-prodDone }()

	select {
	case <-cutSignal:
	case <-time.After(30 * time.Second):
		t.Fatal("relay 0 never published three batches")
	}
	mu.Lock()
	watch.watch(cutBatch[0])
	batch := append([]core.ID(nil), cutBatch...)
	mu.Unlock()
	t.Logf("relay 0 cut off from Kafka as it produces a batch of %d events", len(batch))

	// Relay 0's publish gives up at its timeout, inside the lease, and
	// settles the batch as failed: the database is reachable.
	select {
	case err := <-watch.got:
		if err != nil {
			t.Fatalf("relay 0's settle of the cut-off batch: %v", err)
		}
	case <-time.After(ptLease + 5*time.Second):
		t.Fatal("relay 0 never settled the batch it could not produce")
	}
	gaveUp := time.Since(cutAt)
	if gaveUp > ptLease {
		t.Errorf("relay 0 gave the batch up %s after the cut: after its lease (%s)", gaveUp, ptLease)
	}
	others := func(r int) bool { return r != 0 }
	if err := waitUntil(context.Background(), 20*time.Second, func(context.Context) (bool, error) {
		for _, id := range batch {
			if !w.log.publishedBy(id, others) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the other relays never published relay 0's batch: %v", err)
	}
	takenAfter := time.Since(cutAt)
	healed.Store(true)
	g.heal()

	n0 := w.log.distinct()
	if err := waitUntil(context.Background(), 30*time.Second, func(context.Context) (bool, error) {
		return w.log.distinct() > n0+300, nil
	}); err != nil {
		t.Fatal(err)
	}
	stopProducing()
	<-prodDone
	lost := w.drain(30 * time.Second)
	republished, err := w.log.check()
	if err != nil {
		t.Error(err)
	}

	// What the topic holds, once relay 0's client has delivered what it
	// still had on the wire: it is idle once the outbox is drained.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe, err := outboxkafka.NewClient(c.Seeds())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	total, _, err := kafkatest.EndOffsets(ctx, probe, topic)
	if err != nil {
		t.Fatal(err)
	}
	col := kafkatest.Collect(t, c.Seeds(), topic)
	if err := col.WaitFor(ctx, int(total)); err != nil {
		t.Fatal(err)
	}
	copies := map[core.ID]int{}
	for _, r := range col.Records() {
		e, err := outboxkafka.EventFromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		copies[e.ID]++
	}
	missing, late, lateOutside := 0, 0, 0
	w.log.mu.Lock()
	for _, id := range w.committedIDs() {
		accepted := len(w.log.pubs[id])
		switch n := copies[id]; {
		case n == 0:
			missing++
		case n > accepted:
			late += n - accepted
			mu.Lock()
			if n-accepted > triedCut[id] {
				lateOutside++
			}
			mu.Unlock()
		}
	}
	w.log.mu.Unlock()
	mu.Lock()
	tried := 0
	for _, n := range triedCut {
		tried += n
	}
	mu.Unlock()
	t.Logf("summary: events %d, lost %d (in the topic: %d missing), republished %d, late copies from relay 0's cut-off produces %d (it produced %d events while cut off); publish given up %s after the cut, batch taken over after %s",
		len(w.committedIDs()), lost, missing, republished, late, tried, gaveUp.Round(time.Millisecond), takenAfter.Round(time.Millisecond))
	if lost > 0 || missing > 0 {
		t.Errorf("%d committed events never published, %d missing from the topic", lost, missing)
	}
	if lateOutside > 0 {
		t.Errorf("%d events have more copies in the topic than accepted publishes and relay 0's produces while cut off together", lateOutside)
	}
}
