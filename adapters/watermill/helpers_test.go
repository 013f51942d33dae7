package outboxwatermill_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/adapters/memory"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// memoryAdder makes a memory store (which takes no transaction) an Adder.
func memoryAdder(s *memory.Store) outboxwatermill.Adder[struct{}] {
	return outboxwatermill.AdderFunc[struct{}](func(ctx context.Context, _ struct{}, events ...core.Event) error {
		return s.Add(ctx, events...)
	})
}

// fastSubscriber is an outbox subscriber configuration for tests: short
// polls and backoffs so retries happen within milliseconds.
func fastSubscriber() *outboxwatermill.OutboxSubscriberConfig {
	return &outboxwatermill.OutboxSubscriberConfig{
		PollInterval: 20 * time.Millisecond,
		AckTimeout:   10 * time.Second,
		CloseTimeout: 200 * time.Millisecond,
		Retry: core.RetryPolicy{
			MaxAttempts:    50,
			InitialBackoff: 10 * time.Millisecond,
			MaxBackoff:     50 * time.Millisecond,
			DisableJitter:  true,
		},
	}
}

// newPostgresStore returns a migrated store in a fresh schema and its pool
// (at most maxConns connections).
func newPostgresStore(t testing.TB, maxConns int32) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	pool := pgtest.Pool(t, maxConns)
	schema := pgtest.Schema(t, pool, "wm")
	if err := postgres.Migrate(context.Background(), pool, &postgres.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	store, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return pool, store
}

// collector records the events a Watermill subscription receives, acking
// each, until the subscription ends.
type collector struct {
	mu     sync.Mutex
	events []core.Event
	msgs   []*message.Message
	errs   []error
	done   chan struct{}
}

func collect(ch <-chan *message.Message) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for msg := range ch {
			e, err := outboxwatermill.EventFromMessage(msg)
			c.mu.Lock()
			if err != nil {
				c.errs = append(c.errs, err)
			} else {
				c.events = append(c.events, e)
				c.msgs = append(c.msgs, msg)
			}
			c.mu.Unlock()
			msg.Ack()
		}
	}()
	return c
}

func (c *collector) Events() []core.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]core.Event(nil), c.events...)
}

func (c *collector) Messages() []*message.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*message.Message(nil), c.msgs...)
}

func (c *collector) Errs() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}
