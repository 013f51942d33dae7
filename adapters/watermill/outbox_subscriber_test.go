package outboxwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outboxkit/adapters/memory"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/wmtest"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/tracing"
)

func newMemorySubscriber(t *testing.T, cfg *outboxwatermill.OutboxSubscriberConfig) (*outboxwatermill.OutboxSubscriber, *memory.Store) {
	t.Helper()
	store := memory.NewStore(nil)
	sub, err := outboxwatermill.NewOutboxSubscriber(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub, store
}

func addEvents(t *testing.T, store *memory.Store, topic string, n int) []core.Event {
	t.Helper()
	events := make([]core.Event, n)
	for i := range events {
		events[i] = wmtest.Event(topic, "t")
	}
	if err := store.Add(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
	return events
}

// TestOutboxSubscriberWaitsForAck is Watermill's TestNoAck for one
// subscription (the suite skips it without GuaranteedOrder): the next
// message comes only after the previous one is acknowledged.
func TestOutboxSubscriberWaitsForAck(t *testing.T) {
	t.Parallel()
	sub, store := newMemorySubscriber(t, fastSubscriber())
	events := addEvents(t, store, "q", 2)
	// Another topic's event must not reach this subscription.
	addEvents(t, store, "other", 1)
	ch, err := sub.Subscribe(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	first := wmtest.Receive(t, ch, 5*time.Second)
	if first.UUID != events[0].ID.String() {
		t.Errorf("first message %s, want the oldest event %s", first.UUID, events[0].ID)
	}
	select {
	case msg := <-ch:
		t.Fatalf("got %s while %s was unacknowledged", msg.UUID, first.UUID)
	case <-time.After(200 * time.Millisecond):
	}
	first.Ack()
	second := wmtest.Receive(t, ch, 5*time.Second)
	if second.UUID != events[1].ID.String() {
		t.Errorf("second message %s, want %s", second.UUID, events[1].ID)
	}
	second.Ack()
	wmtest.WaitFor(t, 5*time.Second, "both events to be marked published", func() bool {
		a, _ := store.Get(events[0].ID)
		b, _ := store.Get(events[1].ID)
		return !a.PublishedAt.IsZero() && !b.PublishedAt.IsZero()
	})
}

func TestOutboxSubscriberRetriesNackedUntilDeadLetter(t *testing.T) {
	t.Parallel()
	cfg := fastSubscriber()
	cfg.Retry.MaxAttempts = 3
	sub, store := newMemorySubscriber(t, cfg)
	e := addEvents(t, store, "q", 1)[0]
	ch, err := sub.Subscribe(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		msg := wmtest.Receive(t, ch, 5*time.Second)
		if msg.UUID != e.ID.String() {
			t.Fatalf("attempt %d delivered %s, want %s", attempt, msg.UUID, e.ID)
		}
		msg.Nack()
	}
	wmtest.WaitFor(t, 5*time.Second, "the event to be dead-lettered after 3 nacks", func() bool {
		st, _ := store.Get(e.ID)
		return !st.DeadAt.IsZero()
	})
	st, _ := store.Get(e.ID)
	if st.Event.Attempts != 3 || st.LastError == "" {
		t.Errorf("attempts %d, last error %q; want 3 and the nack recorded", st.Event.Attempts, st.LastError)
	}
	select {
	case msg := <-ch:
		t.Fatalf("dead-lettered event delivered again: %s", msg.UUID)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestOutboxSubscriberCloseWaitsForInFlightAck(t *testing.T) {
	t.Parallel()
	cfg := fastSubscriber()
	cfg.CloseTimeout = 10 * time.Second
	sub, store := newMemorySubscriber(t, cfg)
	events := addEvents(t, store, "q", 3)
	ch, err := sub.Subscribe(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	msg := wmtest.Receive(t, ch, 5*time.Second)
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the in-flight message was acknowledged", err)
	case <-time.After(100 * time.Millisecond):
	}
	if msg.Context().Err() != nil {
		t.Fatal("the in-flight message's context ended before CloseTimeout")
	}
	msg.Ack()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the ack")
	}
	if _, open := <-ch; open {
		t.Fatal("channel still open after Close")
	}
	if st, _ := store.Get(events[0].ID); st.PublishedAt.IsZero() {
		t.Error("message acknowledged during Close is not marked published")
	}
	for _, e := range events[1:] {
		st, _ := store.Get(e.ID)
		if !st.PublishedAt.IsZero() || st.Event.Attempts != 0 || !st.LeaseUntil.IsZero() {
			t.Errorf("event %s never handed out: published %v, attempts %d, lease %v; want released untouched",
				e.ID, st.PublishedAt, st.Event.Attempts, st.LeaseUntil)
		}
	}
}

func TestOutboxSubscriberGivesBackUnackedOnClose(t *testing.T) {
	t.Parallel()
	cfg := fastSubscriber()
	cfg.CloseTimeout = -1 // at once
	sub, store := newMemorySubscriber(t, cfg)
	e := addEvents(t, store, "q", 1)[0]
	ch, err := sub.Subscribe(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	msg := wmtest.Receive(t, ch, 5*time.Second)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if msg.Context().Err() == nil {
		t.Error("the abandoned message's context is still live after Close")
	}
	st, _ := store.Get(e.ID)
	if !st.PublishedAt.IsZero() || st.Event.Attempts != 0 {
		t.Errorf("published %v, attempts %d: an abandoned message must be released for redelivery", st.PublishedAt, st.Event.Attempts)
	}
	msg.Ack() // too late: ignored
	if _, err := sub.Subscribe(context.Background(), "q"); !errors.Is(err, outboxwatermill.ErrClosed) {
		t.Errorf("Subscribe after Close: err = %v, want ErrClosed", err)
	}
}

func TestOutboxSubscriberEndsWithSubscribeContext(t *testing.T) {
	t.Parallel()
	sub, _ := newMemorySubscriber(t, fastSubscriber())
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case _, open := <-ch:
		if open {
			t.Fatal("message on an empty topic")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after the Subscribe context ended")
	}
}

func TestOutboxSubscriberContinuesTheTrace(t *testing.T) {
	t.Parallel()
	cfg := fastSubscriber()
	cfg.ContextFor = tracing.NewExtractor(tracing.WithPropagators(propagation.TraceContext{}))
	sub, store := newMemorySubscriber(t, cfg)
	e := wmtest.Event("q", "t")
	e.Headers = map[string]string{"traceparent": wmtest.Traceparent}
	if err := store.Add(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	ch, err := sub.Subscribe(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	msg := wmtest.Receive(t, ch, 5*time.Second)
	defer msg.Ack()
	sc := trace.SpanContextFromContext(msg.Context())
	if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !sc.IsRemote() {
		t.Errorf("message context span %v, want the remote parent from traceparent", sc)
	}
	if msg.Metadata.Get("traceparent") != wmtest.Traceparent {
		t.Errorf("traceparent metadata %q", msg.Metadata.Get("traceparent"))
	}
	if msg.Context().Value(ctxKey{}) != "v" {
		t.Error("message context lost the Subscribe context's values")
	}
}

type ctxKey struct{}

func TestNewOutboxSubscriberValidates(t *testing.T) {
	t.Parallel()
	if _, err := outboxwatermill.NewOutboxSubscriber(nil, nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("nil store: err = %v", err)
	}
	_, err := outboxwatermill.NewOutboxSubscriber(memory.NewStore(nil), &outboxwatermill.OutboxSubscriberConfig{
		AckTimeout: time.Minute, LeaseDuration: 30 * time.Second,
	})
	var ce *core.ConfigError
	if !errors.As(err, &ce) || ce.Field != "AckTimeout" {
		t.Errorf("AckTimeout beyond the lease: err = %v, want a ConfigError on AckTimeout", err)
	}
}

// TestOutboxSubscriberWakesOnNotify checks the shared listener: with polling
// an hour apart, only PostgreSQL's NOTIFY can deliver promptly.
func TestOutboxSubscriberWakesOnNotify(t *testing.T) {
	t.Parallel()
	pool, store := newPostgresStore(t, 4)
	cfg := fastSubscriber()
	cfg.PollInterval = time.Hour
	counted := &claimCounter{Store: store, notifier: store, claims: map[string]int{}}
	sub, err := outboxwatermill.NewOutboxSubscriber(counted, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	chA, err := sub.Subscribe(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	chB, err := sub.Subscribe(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := outboxwatermill.NewTxPublisher[postgres.DBTX](store, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Once both subscriptions made their first claim, nothing but a wake-up
	// makes them look again within the hour.
	wmtest.WaitFor(t, 5*time.Second, "both subscriptions' first claim", func() bool {
		return counted.Claims("a") > 0 && counted.Claims("b") > 0
	})
	for _, topic := range []string{"a", "b"} {
		if err := pub.Publish(topic, message.NewMessage(core.NewID().String(), []byte(`{}`))); err != nil {
			t.Fatal(err)
		}
	}
	wmtest.Receive(t, chA, 10*time.Second).Ack()
	wmtest.Receive(t, chB, 10*time.Second).Ack()
}

// claimCounter counts a store's claims per destination, and passes its
// notifier through.
type claimCounter struct {
	core.Store
	notifier core.Notifier
	mu       sync.Mutex
	claims   map[string]int
}

func (c *claimCounter) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	c.mu.Lock()
	c.claims[req.Destination]++
	c.mu.Unlock()
	return c.Store.Claim(ctx, req)
}

func (c *claimCounter) Claims(destination string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims[destination]
}

func (c *claimCounter) Listen(ctx context.Context, wake func()) error {
	return c.notifier.Listen(ctx, wake)
}

// noDestinationStore is a store that cannot filter claims by destination.
type noDestinationStore struct{ core.Store }

func (noDestinationStore) Claim(context.Context, core.ClaimRequest) (core.Batch, error) {
	return core.Batch{}, fmt.Errorf("claim by destination: %w", core.ErrUnsupported)
}

func TestOutboxSubscriberEndsWhenStoreCannotFilter(t *testing.T) {
	t.Parallel()
	sub, err := outboxwatermill.NewOutboxSubscriber(noDestinationStore{memory.NewStore(nil)}, fastSubscriber())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case _, open := <-ch:
		if open {
			t.Fatal("got a message from a store that cannot claim")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("subscription kept waiting on a store that cannot claim by destination")
	}
}
