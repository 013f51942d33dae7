package outboxwatermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/adapters/watermill/internal/lifecycle"
	"github.com/outboxkit/outboxkit/core"
)

// OutboxSubscriberConfig configures an OutboxSubscriber. The zero value is
// usable: every field says its default.
type OutboxSubscriberConfig struct {
	// BatchSize is the most events one claim takes. They are handed out one
	// at a time, each after the previous one was acknowledged, so
	// BatchSize × the slowest handling time must fit in AckTimeout. Defaults
	// to 10.
	BatchSize int
	// Concurrency is the number of batches in flight per Subscribe call,
	// which is also the most unacknowledged messages one subscription has
	// out at once. Defaults to 1.
	Concurrency int
	// AckTimeout bounds how long one claimed batch may take to be
	// acknowledged (the relay's PublishTimeout). A message still
	// unacknowledged then, and the rest of its batch, are retried. Defaults
	// to 30s.
	AckTimeout time.Duration
	// LeaseDuration keeps other subscribers (and relays) off a claimed
	// batch. It must exceed AckTimeout. Defaults to twice AckTimeout.
	LeaseDuration time.Duration
	// PollInterval is how long an idle subscription waits before looking for
	// events when no wake-up arrives; it also bounds how late a retry is
	// picked up. Defaults to 1s.
	PollInterval time.Duration
	// CloseTimeout is how long Close (or the end of a Subscribe context)
	// waits for messages already handed out to be acknowledged; the ones
	// still unacknowledged then are given back and redelivered. Defaults to
	// 5s; a negative value gives them back at once.
	CloseTimeout time.Duration
	// Retry is the backoff and dead-letter policy for nacked messages.
	// Defaults to core.RetryPolicy's defaults (first retry after 1s, 10
	// attempts, then dead-lettered).
	Retry core.RetryPolicy
	// DisableNotifier ignores the store's wake-ups (core.Notifier) and relies
	// on polling. By default one listener per OutboxSubscriber, shared by all
	// its subscriptions, wakes them when events are written: on PostgreSQL
	// that is one LISTEN connection however many topics are subscribed.
	DisableNotifier bool
	// Middleware wraps the hand-off to the subscription, as it wraps a
	// relay's publisher (tracing.PublisherMiddleware, say).
	Middleware []core.PublisherMiddleware
	// Hooks observe every settled batch (tracing.RelayHook for metrics).
	Hooks []core.RelayHook
	// ContextFor, when set, derives each message's Context from the context
	// the subscription gives it (which it must return, or a child of it)
	// and the event: set it to tracing.NewExtractor() so that the handler
	// continues the producer's trace from msg.Context(). Defaults to nil:
	// the message's Context carries the Subscribe context's values only,
	// and the trace context travels in the message's metadata (traceparent,
	// tracestate, baggage) alone.
	ContextFor func(ctx context.Context, e core.Event) context.Context
	// Logger receives the relays' logs (one warning per nacked message).
	// Defaults to a logger that discards.
	Logger *slog.Logger
	// Clock is the time source of the relays and of CloseTimeout. Defaults
	// to core.SystemClock.
	Clock core.Clock
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c OutboxSubscriberConfig) WithDefaults() OutboxSubscriberConfig {
	if c.BatchSize == 0 {
		c.BatchSize = 10
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 30 * time.Second
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 2 * c.AckTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = core.SystemClock{}
	}
	return c
}

// relayConfig is the relay configuration of one subscription.
func (c OutboxSubscriberConfig) relayConfig(topic string) core.RelayConfig {
	return core.RelayConfig{
		BatchSize:      c.BatchSize,
		Concurrency:    c.Concurrency,
		LeaseDuration:  c.LeaseDuration,
		PublishTimeout: c.AckTimeout,
		PollInterval:   c.PollInterval,
		// The subscription runs its own grace period (CloseTimeout) for
		// messages already handed out, and must see the relay's publish
		// context end at once on shutdown so that the events it gives back
		// are released, not counted as failed attempts.
		ShutdownTimeout: time.Nanosecond,
		Destination:     topic,
		Retry:           c.Retry,
		Middleware:      c.Middleware,
		Hooks:           c.Hooks,
		// The subscriber shares one listener among its subscriptions.
		DisableNotifier: true,
		Logger:          c.Logger,
		Clock:           c.Clock,
	}
}

// OutboxSubscriber is a Watermill message.Subscriber fed straight from an
// outbox store: PostgreSQL as the broker, with no transport in between.
// Subscribe(ctx, topic) runs a core.Relay dedicated to the events whose
// Destination is topic (the topic a TxPublisher wrote them for), whose
// publisher hands each event to the subscription's channel and waits: Ack
// marks it published, Nack schedules a retry with the Retry policy's
// backoff, and after Retry.MaxAttempts it is dead-lettered in the store like
// any event.
//
// It works with any core.Store whose Claim honours ClaimRequest.Destination
// (the postgres and memory stores do). With a store that answers
// core.ErrUnsupported instead, the subscription logs the error and ends,
// closing its channel, rather than waiting for events it can never claim. Subscriptions to one
// topic, in one process or many, compete for its events: each event goes to
// one of them, like a single consumer group. Delivery is at-least-once: an
// event whose lease expires, or whose acknowledgement comes after
// AckTimeout, is delivered again, so handlers deduplicate by event ID.
// Events are delivered oldest first, but a nacked event is retried later
// while the others go on, so order is not guaranteed.
type OutboxSubscriber struct {
	store  core.Store
	cfg    OutboxSubscriberConfig
	subs   *lifecycle.Subscriptions
	listen sync.Once // starts the listener at the first Subscribe

	mu     sync.Mutex
	relays map[*core.Relay]struct{} // those of the live subscriptions, to wake
}

var _ message.Subscriber = (*OutboxSubscriber)(nil)

// NewOutboxSubscriber returns a subscriber over store. cfg may be nil.
func NewOutboxSubscriber(store core.Store, cfg *OutboxSubscriberConfig) (*OutboxSubscriber, error) {
	if store == nil {
		return nil, &core.ConfigError{Field: "store", Reason: "is nil: pass the outbox store (a *postgres.Store, say)"}
	}
	var c OutboxSubscriberConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	// The relay validates the configuration; its PublishTimeout is our
	// AckTimeout, so name the field the caller set.
	rc := c.relayConfig("validate")
	if _, err := core.NewRelay(store, core.PublisherFunc(func(context.Context, []core.Event) error { return nil }), &rc); err != nil {
		var ce *core.ConfigError
		if errors.As(err, &ce) && ce.Field == "PublishTimeout" {
			return nil, &core.ConfigError{Field: "AckTimeout", Reason: ce.Reason}
		}
		return nil, err
	}
	return &OutboxSubscriber{store: store, cfg: c, subs: lifecycle.New(), relays: make(map[*core.Relay]struct{})}, nil
}

// Subscribe starts consuming the events bound for topic. The returned
// channel is closed once ctx is done or the subscriber is closed, after the
// messages already handed out were acknowledged or CloseTimeout passed.
// Each message's Context carries ctx's values (and, with ContextFor, the
// event's trace context), and is cancelled once the message is acknowledged
// or given back.
func (s *OutboxSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out, err := s.subs.Subscribe(ctx, topic, func(ctx context.Context, stop context.CancelFunc, out chan<- *message.Message) (func(), error) {
		sub := &outboxSubscription{s: s, ctx: ctx, out: out, topic: topic}
		rc := s.cfg.relayConfig(topic)
		store := unsupportedGuard{Store: s.store, fail: func(err error) {
			s.cfg.Logger.Error("outboxwatermill: the store cannot claim by destination; subscription ended", "topic", topic, "error", err)
			stop()
		}}
		relay, err := core.NewRelay(store, core.PublisherFunc(sub.deliver), &rc)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.relays[relay] = struct{}{}
		s.mu.Unlock()
		return func() {
			_ = relay.Run(ctx) // errors only when run twice, which cannot happen here
			s.mu.Lock()
			delete(s.relays, relay)
			s.mu.Unlock()
		}, nil
	})
	if err != nil {
		return nil, err
	}
	s.startListener()
	return out, nil
}

// Close ends every subscription and waits for their channels to close. It is
// idempotent.
func (s *OutboxSubscriber) Close() error {
	s.subs.Close()
	return nil
}

// startListener runs the store's Notifier, once per subscriber, waking every
// subscription's relay.
func (s *OutboxSubscriber) startListener() {
	n, ok := s.store.(core.Notifier)
	if !ok || s.cfg.DisableNotifier {
		return
	}
	s.listen.Do(func() {
		s.subs.Go(func(ctx context.Context) {
			if err := n.Listen(ctx, s.wakeAll); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("outboxwatermill: outbox notifier stopped; subscriptions rely on polling", "error", err)
			}
		})
	})
}

func (s *OutboxSubscriber) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.relays {
		r.Wake()
	}
}

// outboxSubscription is one Subscribe call.
type outboxSubscription struct {
	s     *OutboxSubscriber
	ctx   context.Context // the subscription's lifetime
	out   chan<- *message.Message
	topic string
}

// errGivenBack is the outcome of events a stopping subscription did not hand
// out. The relay releases them (it is shutting down), so no attempt counts.
var errGivenBack = errors.New("outboxwatermill: subscription stopped before the message was handed out")

// deliver is the relay's publisher: it hands events out one at a time, each
// after the previous one was acknowledged.
func (sub *outboxSubscription) deliver(ctx context.Context, events []core.Event) error {
	be := core.NewBatchError(len(events))
	for i, e := range events {
		if sub.ctx.Err() != nil {
			for j := i; j < len(events); j++ {
				be.Set(j, errGivenBack)
			}
			// The relay ends ctx right after the subscription's context (its
			// ShutdownTimeout is a nanosecond); returning only then makes it
			// release these events instead of scheduling a retry.
			<-ctx.Done()
			return be
		}
		be.Set(i, sub.deliverOne(ctx, e))
	}
	return be.ErrOrNil()
}

// deliverOne hands one event out and waits for its acknowledgement.
func (sub *outboxSubscription) deliverOne(ctx context.Context, e core.Event) error {
	msg, err := MessageFromEvent(e)
	if err != nil {
		return core.Permanent(err)
	}
	// The message lives until it is acknowledged or given back, not just as
	// long as the relay's publish context, which shutdown ends at once.
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	if sub.s.cfg.ContextFor != nil {
		mctx = sub.s.cfg.ContextFor(mctx, e)
	}
	msg.SetContext(mctx)

	select {
	case sub.out <- msg:
	case <-sub.ctx.Done():
		<-ctx.Done() // see deliver: released, not retried
		return errGivenBack
	case <-ctx.Done():
		return fmt.Errorf("outboxwatermill: event %s on topic %q was not taken within AckTimeout: %w", e.ID, sub.topic, ctx.Err())
	}

	// Stopping, the handler gets CloseTimeout; otherwise ctx's error means
	// AckTimeout passed.
	err = lifecycle.AwaitAck(ctx, msg, sub.ctx.Done(), sub.s.cfg.CloseTimeout, sub.s.cfg.Clock)
	switch {
	case errors.Is(err, ErrClosed):
		<-ctx.Done() // see deliver: released, not retried
	case err != nil && err == ctx.Err():
		return fmt.Errorf("outboxwatermill: message %s on topic %q was not acknowledged within AckTimeout: %w", e.ID, sub.topic, err)
	}
	return err
}

// unsupportedGuard ends a subscription whose store cannot filter claims by
// destination: its relay would otherwise log the same error every poll and
// deliver nothing.
type unsupportedGuard struct {
	core.Store
	fail func(error)
}

func (g unsupportedGuard) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	b, err := g.Store.Claim(ctx, req)
	if errors.Is(err, core.ErrUnsupported) {
		g.fail(err)
	}
	return b, err
}
