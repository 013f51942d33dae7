// Command inmemory is the smallest outboxkit program: an in-memory outbox, a
// relay and a consumer that applies each event once, all in one process. It
// needs no database and shows the moving parts; examples/quickstart shows the
// real thing on PostgreSQL and QStash.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "inmemory:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	store := memory.NewStore(nil)
	deduper := memory.NewDeduper()

	// The consumer: applied once per event however often it is delivered.
	var applied, attempts atomic.Int64
	mux := core.NewMux()
	mux.RegisterFunc("order.placed", func(ctx context.Context, e core.Event) error {
		applied.Add(1)
		return nil
	})
	consumer := core.ChainHandler(mux, core.Recover(), core.Idempotent(deduper, "billing"))

	// The transport: hands events to the consumer, failing every third first
	// attempt and delivering every event twice, as real transports may.
	transport := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		be := core.NewBatchError(len(events))
		for i, e := range events {
			if attempts.Add(1)%3 == 0 && e.Attempts == 1 {
				be.Set(i, errors.New("transport hiccup"))
				continue
			}
			for range 2 {
				if err := consumer.Handle(ctx, e); err != nil {
					be.Set(i, err)
				}
			}
		}
		return be.ErrOrNil()
	})

	relay, err := core.NewRelay(store, transport, &core.RelayConfig{
		BatchSize: 50, PollInterval: 20 * time.Millisecond,
		Retry: core.RetryPolicy{InitialBackoff: 10 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	const orders = 200
	for i := range orders {
		e, err := core.NewEvent("order.placed", map[string]int{"order": i})
		if err != nil {
			return err
		}
		// With a database this is the business transaction: the order row
		// and the event commit together or not at all.
		if err := store.Add(ctx, e); err != nil {
			return err
		}
	}

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := store.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Pending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d events still pending: %w", st.Pending, ctx.Err())
		case <-tick.C:
		}
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	fmt.Printf("orders placed: %d\npublish attempts: %d\neffects applied: %d (each order once, despite retries and duplicate deliveries)\n",
		orders, attempts.Load(), applied.Load())
	if applied.Load() != orders {
		return fmt.Errorf("applied %d effects for %d orders", applied.Load(), orders)
	}
	return nil
}
