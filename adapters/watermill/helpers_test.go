package outboxwatermill_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
)

// memoryAdder makes a memory store (which takes no transaction) an Adder.
func memoryAdder(s *memory.Store) outboxwatermill.Adder[struct{}] {
	return outboxwatermill.AdderFunc[struct{}](func(ctx context.Context, _ struct{}, events ...core.Event) error {
		return s.Add(ctx, events...)
	})
}

// waitFor polls cond until it holds, failing the test at the deadline:
// tests wait on conditions, never on fixed sleeps.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
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
