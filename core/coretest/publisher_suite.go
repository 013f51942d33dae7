package coretest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// TestPublisher runs the Publisher conformance suite.
func TestPublisher(t *testing.T, h PublisherHarness) {
	t.Helper()
	timeout := h.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx := context.Background()

	received := func(recv func() []core.Event) map[core.ID]core.Event {
		m := make(map[core.ID]core.Event)
		for _, e := range recv() {
			m[e.ID] = e
		}
		return m
	}

	t.Run("PublishesEveryEventIntact", func(t *testing.T) {
		pub, recv := h.New(t)
		events := make([]core.Event, 5)
		for i := range events {
			e := newEvent(fmt.Sprintf("order.%d", i), t0.Add(time.Duration(i)*time.Second))
			e.Payload = json.RawMessage(fmt.Sprintf(`{"order":%d,"items":["a","b"]}`, i))
			e.AggregateType, e.AggregateID = "order", fmt.Sprint(i)
			events[i] = e
		}
		if err := pub.Publish(ctx, events); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		waitUntil(t, timeout, "all 5 events to arrive", func() bool { return len(received(recv)) >= 5 })
		got := received(recv)
		for _, want := range events {
			e, ok := got[want.ID]
			if !ok {
				t.Fatalf("event %s never arrived", want.ID)
			}
			if e.Type != want.Type {
				t.Errorf("event %s: type %q, want %q", want.ID, e.Type, want.Type)
			}
			var a, b any
			if json.Unmarshal(e.Payload, &a) != nil || json.Unmarshal(want.Payload, &b) != nil || !jsonEqual(a, b) {
				t.Errorf("event %s: payload %s, want %s", want.ID, e.Payload, want.Payload)
			}
			if e.Headers["traceparent"] != want.Headers["traceparent"] {
				t.Errorf("event %s: traceparent %q, want %q", want.ID, e.Headers["traceparent"], want.Headers["traceparent"])
			}
		}
	})

	t.Run("EmptyBatchIsANoOp", func(t *testing.T) {
		pub, recv := h.New(t)
		if err := pub.Publish(ctx, nil); err != nil {
			t.Fatalf("Publish(nil): %v", err)
		}
		if n := len(recv()); n != 0 {
			t.Fatalf("empty publish delivered %d events", n)
		}
	})

	t.Run("ConcurrentPublishes", func(t *testing.T) {
		pub, recv := h.New(t)
		const goroutines, per = 4, 10
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				batch := make([]core.Event, per)
				for i := range batch {
					batch[i] = newEvent("concurrent", t0)
				}
				errs <- pub.Publish(ctx, batch)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent Publish: %v", err)
			}
		}
		waitUntil(t, timeout, "all concurrent events to arrive", func() bool { return len(received(recv)) >= goroutines*per })
	})

	t.Run("HonoursCancelledContext", func(t *testing.T) {
		pub, _ := h.New(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		done := make(chan error, 1)
		go func() { done <- pub.Publish(cctx, []core.Event{newEvent("cancelled", t0)}) }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("Publish with a cancelled context returned nil; it must report the events as not published")
			}
		case <-time.After(timeout):
			t.Fatal("Publish ignored its cancelled context")
		}
	})
}

// equalJSON reports whether two JSON texts encode the same value: stores
// may normalise whitespace and key order.
func equalJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && jsonEqual(x, y)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
