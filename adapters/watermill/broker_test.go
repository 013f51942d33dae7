package outboxwatermill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/adapters/memory"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/wmtest"
)

// brokerRoundTrip relays outbox events through a real broker (wpub → sub on
// topic) and checks what a deduplicating consumer sees: every event
// arrives, the message UUID is the event ID, attributes and trace context
// survive as metadata, and publishing every event a second time (what a
// relay does after a crash between publish and settle) applies no effect
// twice.
func brokerRoundTrip(t *testing.T, wpub message.Publisher, sub message.Subscriber, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const n = 20
	store := memory.NewStore(nil)
	events := make([]core.Event, n)
	byID := make(map[string]core.Event, n)
	for i := range events {
		e := core.Event{
			ID: core.NewID(), Type: "order.placed", SchemaVersion: 2, Source: "shop",
			AggregateType: "order", AggregateID: strconv.Itoa(i), Destination: topic,
			Payload: json.RawMessage(fmt.Sprintf(`{"order":%d}`, i)),
			Headers: map[string]string{
				"traceparent": fmt.Sprintf("00-0af7651916cd43dd8448eb211c8031%02x-b7ad6b7169203331-01", i),
				"tracestate":  "shop=1",
				"tenant":      "acme",
			},
		}
		events[i] = e
		byID[e.ID.String()] = e
	}
	if err := store.Add(ctx, events...); err != nil {
		t.Fatal(err)
	}

	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	deduper := memory.NewDeduper()
	var (
		mu         sync.Mutex
		deliveries int
		effects    = make(map[core.ID]int)
		problems   []string
	)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for msg := range msgs {
			e, err := outboxwatermill.EventFromMessage(msg)
			mu.Lock()
			deliveries++
			if err != nil {
				problems = append(problems, fmt.Sprintf("message %s: %v", msg.UUID, err))
			} else if msg.UUID != e.ID.String() {
				problems = append(problems, fmt.Sprintf("message UUID %s is not the event ID %s", msg.UUID, e.ID))
			}
			mu.Unlock()
			if err == nil {
				_, err = deduper.Once(ctx, core.DedupeKey{Consumer: "billing", EventID: e.ID}, func(context.Context) error {
					mu.Lock()
					defer mu.Unlock()
					effects[e.ID]++
					want, known := byID[e.ID.String()]
					switch {
					case !known:
						problems = append(problems, "unknown event "+e.ID.String())
					case e.Type != want.Type || e.Source != want.Source || e.AggregateID != want.AggregateID ||
						e.AggregateType != want.AggregateType || e.SchemaVersion != want.SchemaVersion ||
						string(e.Payload) != string(want.Payload):
						problems = append(problems, fmt.Sprintf("event %s arrived as %+v", e.ID, e))
					case e.Headers["traceparent"] != want.Headers["traceparent"] || e.Headers["tracestate"] != "shop=1" ||
						e.Headers["tenant"] != "acme" || msg.Metadata.Get("traceparent") != want.Headers["traceparent"]:
						problems = append(problems, fmt.Sprintf("event %s lost headers: %v", e.ID, msg.Metadata))
					}
					return nil
				})
			}
			if err != nil {
				msg.Nack()
				continue
			}
			msg.Ack()
		}
	}()

	bridge, err := outboxwatermill.NewPublisher(wpub, nil)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := core.NewRelay(store, bridge, &core.RelayConfig{BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	if settled, err := relay.Drain(ctx); err != nil || settled != n {
		t.Fatalf("Drain settled %d events (%v), want %d", settled, err, n)
	}
	for _, e := range events {
		if st, _ := store.Get(e.ID); st.PublishedAt.IsZero() {
			t.Fatalf("event %s not marked published: %+v", e.ID, st)
		}
	}
	// Redelivery: the same events once more.
	if err := bridge.Publish(ctx, events); err != nil {
		t.Fatalf("republish: %v", err)
	}
	wmtest.WaitFor(t, 30*time.Second, "both deliveries of every event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return deliveries >= 2*n
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if len(effects) != n {
		t.Errorf("%d distinct events applied, want %d", len(effects), n)
	}
	for id, k := range effects {
		if k != 1 {
			t.Errorf("event %s applied %d times, want once", id, k)
		}
	}
	if deliveries != 2*n {
		t.Errorf("%d deliveries, want %d (each event twice)", deliveries, 2*n)
	}
}
