package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// newRouter wires the consumer. Middleware runs outermost first:
//
//   - CorrelationID copies the correlation ID the producer set onto any
//     message the handler produces (it travelled through the outbox as an
//     event header, then as NATS metadata);
//   - PoisonQueue sends a message whose handling still fails after the
//     retries to the poison topic and acknowledges it, so one bad order
//     cannot block the others;
//   - Retry retries in-process with backoff, except errors marked
//     core.Permanent, which no retry can fix;
//   - Recoverer turns a panic into an error, which Retry then retries.
func newRouter(s *shipping, sub message.Subscriber, pub message.Publisher, ordersTopic, poisonTopic string, logger watermill.LoggerAdapter) (*message.Router, error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, err
	}
	poison, err := middleware.PoisonQueue(pub, poisonTopic)
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(
		middleware.CorrelationID,
		poison,
		middleware.Retry{
			MaxRetries:      3,
			InitialInterval: 10 * time.Millisecond,
			Multiplier:      2,
			ShouldRetry:     func(p middleware.RetryParams) bool { return !core.IsPermanent(p.Err) },
			// No Logger: the failures here are on purpose, and a retried
			// panic's stack would flood the output.
		}.Middleware,
		middleware.Recoverer,
	)
	router.AddConsumerHandler("ship-orders", ordersTopic, sub, s.handle)
	router.AddConsumerHandler("count-poisoned", poisonTopic, sub, s.handlePoisoned)
	return router, nil
}

// shipping is the consumer: it ships each order once, however often its
// event is delivered.
type shipping struct {
	deduper *postgres.Deduper
	schema  string

	mu       sync.Mutex
	st       shippingStats
	attempts map[string]int  // handler calls per order
	failed   map[string]bool // orders whose last call failed and may be retried
	poisoned map[string]bool
}

type shippingStats struct {
	applied        int
	appliedIDs     []core.ID
	duplicates     int
	poisoned       int
	retried        int
	badCorrelation int
	rolledBackSeen int
}

func (s *shipping) count(f func(*shippingStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.st)
}

func (s *shipping) stats() shippingStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.appliedIDs = append([]core.ID(nil), s.st.appliedIDs...)
	return st
}

// handle ships one order. The shipment row and the deduper's record commit
// in one transaction, so the effect happens exactly once under
// at-least-once delivery.
func (s *shipping) handle(msg *message.Message) (err error) {
	e, err := outboxwatermill.EventFromMessage(msg)
	if err != nil {
		return core.Permanent(err)
	}
	var o order
	if err := json.Unmarshal(e.Payload, &o); err != nil {
		return core.Permanent(fmt.Errorf("event %s: %w", e.ID, err))
	}
	s.mu.Lock()
	if s.attempts == nil {
		s.attempts, s.failed = make(map[string]int), make(map[string]bool)
	}
	s.attempts[o.ID]++
	first := s.attempts[o.ID] == 1
	if s.failed[o.ID] {
		s.st.retried++
		delete(s.failed, o.ID)
	}
	if middleware.MessageCorrelationID(msg) != o.ID {
		s.st.badCorrelation++
	}
	if o.ID == "order-rolled-back" {
		s.st.rolledBackSeen++
	}
	s.mu.Unlock()

	// A failure that is not permanent (a panic included: this defer runs
	// before Recoverer's) will be retried; remember it to count retries.
	retryable := true
	defer func() {
		if retryable {
			s.mu.Lock()
			s.failed[o.ID] = true
			s.mu.Unlock()
		}
	}()

	key := core.DedupeKey{Consumer: "shipping", EventID: e.ID}
	applied, err := s.deduper.Once(msg.Context(), key, func(ctx context.Context) error {
		if o.Quantity <= 0 {
			return core.Permanent(fmt.Errorf("order %s has quantity %d", o.ID, o.Quantity))
		}
		tx, ok := postgres.TxFromContext(ctx)
		if !ok {
			return errors.New("the deduper gave the effect no transaction")
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{s.schema, "shipments"}.Sanitize()+" (order_id, event_id) VALUES ($1, $2)",
			o.ID, e.ID.String()); err != nil {
			return err
		}
		// The failures below come after the insert: the transaction rolls
		// back, so neither the shipment nor the deduper's record stays, and
		// the retry ships the order for real.
		if first && o.Flaky {
			return errors.New("simulated serialization failure")
		}
		if first && o.Panics {
			panic("simulated bug")
		}
		return nil
	})
	retryable = err != nil && !core.IsPermanent(err)
	s.count(func(st *shippingStats) {
		switch {
		case err != nil:
		case applied:
			st.applied++
			st.appliedIDs = append(st.appliedIDs, e.ID)
		default:
			st.duplicates++
		}
	})
	return err
}

// handlePoisoned counts the orders that ended in the poison queue.
func (s *shipping) handlePoisoned(msg *message.Message) error {
	if msg.Metadata.Get(middleware.ReasonForPoisonedKey) == "" {
		return core.Permanent(errors.New("poison message without a reason"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.poisoned == nil {
		s.poisoned = make(map[string]bool)
	}
	if !s.poisoned[msg.UUID] {
		s.poisoned[msg.UUID] = true
		s.st.poisoned++
	}
	return nil
}
