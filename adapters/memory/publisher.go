package memory

import (
	"context"
	"sync"

	"github.com/outboxkit/outboxkit/core"
)

// Publisher is a core.Publisher that records what it is given. It can be told
// to fail events (FailWith), which makes it the sink for relay tests and
// benchmarks.
type Publisher struct {
	mu        sync.Mutex
	published []core.Event
	calls     int
	fail      func(core.Event) error
	changed   chan struct{} // closed and replaced after every Publish
}

var _ core.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that accepts everything.
func NewPublisher() *Publisher { return &Publisher{changed: make(chan struct{})} }

// FailWith makes Publish fail each event for which f returns an error (nil f
// accepts everything again). Return core.Permanent(err) to have the relay
// dead-letter the event.
func (p *Publisher) FailWith(f func(core.Event) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = f
}

// Publish records the events that do not fail. It returns ctx.Err() without
// recording anything when ctx is already done.
func (p *Publisher) Publish(ctx context.Context, events []core.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	be := core.NewBatchError(len(events))
	for i, e := range events {
		if p.fail != nil {
			if err := p.fail(e); err != nil {
				be.Set(i, err)
				continue
			}
		}
		p.published = append(p.published, e.Clone())
	}
	close(p.changed)
	p.changed = make(chan struct{})
	return be.ErrOrNil()
}

// Published returns a copy of every event published so far, in order.
func (p *Publisher) Published() []core.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]core.Event(nil), p.published...)
}

// Count returns the number of events published so far.
func (p *Publisher) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.published)
}

// Calls returns the number of Publish calls so far.
func (p *Publisher) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// WaitFor blocks until at least n events were published or ctx is done.
func (p *Publisher) WaitFor(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		count, changed := len(p.published), p.changed
		p.mu.Unlock()
		if count >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
