package lifecycle

import (
	"context"
	"errors"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Sentinel errors, re-exported by outboxwatermill.
var (
	// ErrClosed is outboxwatermill.ErrClosed.
	ErrClosed = errors.New("outboxwatermill: closed")
	// ErrNacked is outboxwatermill.ErrNacked.
	ErrNacked = errors.New("outboxwatermill: message nacked by the consumer")
)

// Subscriptions runs the subscriptions of one subscriber, and the
// goroutines serving them, and ends them all on Close. Make one with New.
type Subscriptions struct {
	closing context.Context // done once Close is called
	close   context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// New returns a Subscriptions with nothing running.
func New() *Subscriptions {
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriptions{closing: ctx, close: cancel}
}

// Closing is closed once Close is called.
func (s *Subscriptions) Closing() <-chan struct{} { return s.closing.Done() }

// Start prepares one subscription. It gets the subscription's context,
// which ends with Subscribe's, with Close or with stop, and the channel the
// subscription hands its messages out on. It returns the subscription's
// body, which runs on a goroutine of its own and must return once ctx is
// done, or an error for Subscribe to return.
//
// Start runs under the lock Close takes, so a subscriber never starts a
// subscription after Close; it must not call the Subscriptions' methods.
type Start func(ctx context.Context, stop context.CancelFunc, out chan<- *message.Message) (run func(), err error)

// Subscribe starts a subscription to topic with start and returns its
// channel, which is closed once the subscription's body has returned. It
// refuses an empty topic, and returns ErrClosed after Close.
func (s *Subscriptions) Subscribe(ctx context.Context, topic string, start Start) (<-chan *message.Message, error) {
	if topic == "" {
		return nil, errors.New("outboxwatermill: subscribe: empty topic")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	subCtx, cancel := context.WithCancel(ctx)
	unlink := context.AfterFunc(s.closing, cancel)
	out := make(chan *message.Message)
	run, err := start(subCtx, cancel, out)
	if err != nil {
		unlink()
		cancel()
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer cancel()
		defer unlink()
		run()
	}()
	return out, nil
}

// Go runs f on a goroutine of its own that Close ends (f's ctx) and waits
// for. After Close it runs nothing and reports false.
func (s *Subscriptions) Go(f func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.closing)
	}()
	return true
}

// Close ends every subscription and the goroutines Go started, and waits
// for them to return. It is idempotent.
func (s *Subscriptions) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.close()
	s.mu.Unlock()
	s.wg.Wait()
}
