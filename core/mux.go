package core

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultUnknownTypeRetry is how long after an event's CreatedAt a Mux keeps
// asking for an unknown type to be redelivered, by default.
const DefaultUnknownTypeRetry = time.Hour

// Mux routes events to handlers by their type, so a *Mux is itself a
// Handler.
//
// An event whose type has no handler (and no Fallback) fails with an error
// matching ErrUnknownEventType. By default that error is transient for
// DefaultUnknownTypeRetry after the event's CreatedAt, and permanent after
// it: in a rolling deploy a producer ships a new type before every consumer
// has its handler, and the event must be redelivered until the handler is
// there rather than dead-lettered at once; a type still unknown an hour later
// is a mistake that retrying will not fix, and the transport dead-letters it.
// An event without a CreatedAt (a foreign producer that sent no ce-time)
// cannot be aged and is dead-lettered at once. RetryUnknownTypesFor,
// DeadLetterUnknownTypes and RetryUnknownTypesForever change the policy; the
// transport's own retry limit still applies on top of it.
//
// A Mux is safe for concurrent use; register handlers before serving.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]Handler
	mws      []HandlerMiddleware
	fallback Handler
	opts     muxOptions
}

// MuxOption configures a Mux at construction.
type MuxOption func(*muxOptions)

type muxOptions struct {
	// retryFor is the unknown-type retry window: 0 dead-letters at once,
	// negative retries forever.
	retryFor time.Duration
	clock    Clock
}

// RetryUnknownTypesFor makes the Mux answer an unknown event type with a
// transient error until d after the event's CreatedAt, and with a permanent
// one from then on. d <= 0 dead-letters at once. The default is
// DefaultUnknownTypeRetry.
func RetryUnknownTypesFor(d time.Duration) MuxOption {
	return func(o *muxOptions) { o.retryFor = max(d, 0) }
}

// DeadLetterUnknownTypes makes the Mux answer an unknown event type with a
// permanent error at once, for consumers that are always deployed before
// their producers.
func DeadLetterUnknownTypes() MuxOption { return RetryUnknownTypesFor(0) }

// RetryUnknownTypesForever makes the Mux answer an unknown event type with a
// transient error however old the event is, leaving the bound to the
// transport's retry limit.
func RetryUnknownTypesForever() MuxOption {
	return func(o *muxOptions) { o.retryFor = -1 }
}

// MuxClock sets the clock the Mux ages events with. Defaults to SystemClock;
// tests pass a coretest.FakeClock.
func MuxClock(c Clock) MuxOption {
	return func(o *muxOptions) {
		if c != nil {
			o.clock = c
		}
	}
}

// NewMux returns an empty Mux configured by opts.
func NewMux(opts ...MuxOption) *Mux {
	o := muxOptions{retryFor: DefaultUnknownTypeRetry, clock: SystemClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	return &Mux{handlers: make(map[string]Handler), opts: o}
}

// Register routes eventType to h. It panics if eventType is empty or already
// registered, as http.ServeMux does, because both are programming errors.
func (m *Mux) Register(eventType string, h Handler) {
	if eventType == "" || h == nil {
		panic("outboxkit: Mux.Register needs an event type and a handler")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[eventType]; dup {
		panic(fmt.Sprintf("outboxkit: Mux already has a handler for %q", eventType))
	}
	m.handlers[eventType] = h
}

// RegisterFunc routes eventType to f.
func (m *Mux) RegisterFunc(eventType string, f func(ctx context.Context, e Event) error) {
	m.Register(eventType, HandlerFunc(f))
}

// Fallback sets the handler for types with no handler of their own, instead
// of failing them.
func (m *Mux) Fallback(h Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fallback = h
}

// Use adds middleware that wraps every routed handler (not unknown types).
func (m *Mux) Use(mws ...HandlerMiddleware) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mws = append(m.mws, mws...)
}

// Handle routes e to its handler.
func (m *Mux) Handle(ctx context.Context, e Event) error {
	m.mu.RLock()
	h, ok := m.handlers[e.Type]
	if !ok {
		h = m.fallback
	}
	mws := m.mws
	m.mu.RUnlock()
	if h == nil {
		return m.unknownType(e)
	}
	return ChainHandler(h, mws...).Handle(ctx, e)
}

// unknownType applies the unknown-type policy to e.
func (m *Mux) unknownType(e Event) error {
	switch retryFor := m.opts.retryFor; {
	case retryFor < 0:
		return fmt.Errorf("%w %q: asking for redelivery until a handler is deployed", ErrUnknownEventType, e.Type)
	case retryFor > 0 && !e.CreatedAt.IsZero():
		if until := e.CreatedAt.Add(retryFor); m.opts.clock.Now().Before(until) {
			return fmt.Errorf("%w %q: asking for redelivery until %s (%s after the event was created) in case its handler is being deployed",
				ErrUnknownEventType, e.Type, until.UTC().Format(time.RFC3339), retryFor)
		}
		return Permanent(fmt.Errorf("%w %q, still %s after the event was created", ErrUnknownEventType, e.Type, retryFor))
	default:
		return Permanent(fmt.Errorf("%w %q", ErrUnknownEventType, e.Type))
	}
}
