package outboxwatermill

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
)

// PublisherConfig configures a Publisher. The zero value is usable.
type PublisherConfig struct {
	// Topic picks the Watermill topic of an event. Defaults to DefaultTopic:
	// the event's Destination, else its Type. An event for which it returns
	// "" is dead-lettered: no retry can give it a topic.
	Topic func(e core.Event) string

	// GroupByTopic publishes the events of a batch that share a topic with
	// one Publish call instead of one call each, which saves round trips on
	// publishers that batch (Kafka, say). Watermill reports one error for
	// the whole call and does not say which messages went out before it, so
	// when such a call fails every event of the group is retried, including
	// any that were delivered: consumers deduplicate them by event ID.
	// Defaults to false: one call per event, so the outcome of each event is
	// exact.
	GroupByTopic bool
}

// DefaultTopic is the default PublisherConfig.Topic: e.Destination, else
// e.Type.
func DefaultTopic(e core.Event) string {
	if e.Destination != "" {
		return e.Destination
	}
	return e.Type
}

// Publisher is a core.Publisher that relays events to any Watermill
// message.Publisher (NATS JetStream, AMQP, Kafka, Redis streams, GoChannel):
// run a core.Relay with it and the outbox feeds a Watermill broker. Each
// event becomes the message MessageFromEvent builds: UUID = event ID,
// CloudEvents attributes and trace context as metadata.
//
// Publish reports each event's outcome in a *core.BatchError aligned with
// its input. Watermill's Publish takes no context, so Publish runs it on
// another goroutine and returns as soon as ctx is done, reporting the events
// not yet confirmed as failed with ctx's error. A publish already under way
// may still complete afterwards; the relay then retries an event that was in
// fact delivered, which at-least-once delivery allows and consumers absorb by
// deduplicating on the event ID. Messages carry ctx (msg.Context()), so
// publishers that honour it stop early.
//
// Publisher does not own the Watermill publisher: closing it is the
// caller's job, after the relay has stopped.
type Publisher struct {
	pub   message.Publisher
	topic func(core.Event) string
	group bool
}

var _ core.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher relaying to pub. cfg may be nil.
func NewPublisher(pub message.Publisher, cfg *PublisherConfig) (*Publisher, error) {
	if pub == nil {
		return nil, &core.ConfigError{Field: "publisher", Reason: "is nil: pass the Watermill publisher to relay to (a watermill-nats, watermill-amqp, ... publisher)"}
	}
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Topic == nil {
		c.Topic = DefaultTopic
	}
	return &Publisher{pub: pub, topic: c.Topic, group: c.GroupByTopic}, nil
}

// call is one Watermill Publish call: a topic and the batch positions of its
// messages.
type call struct {
	topic string
	idx   []int
	msgs  []*message.Message
}

// Publish implements core.Publisher.
func (p *Publisher) Publish(ctx context.Context, events []core.Event) error {
	if len(events) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	be := core.NewBatchError(len(events))
	calls := p.plan(ctx, events, be)

	// settled[i] says event i has its outcome in be; the goroutine and this
	// one share both under mu, and abandoned tells the goroutine that this
	// one has returned and its late results no longer count.
	var (
		mu        sync.Mutex
		settled   = make([]bool, len(events))
		abandoned bool
	)
	for i, err := range be.Errs {
		settled[i] = err != nil
	}
	record := func(c call, err error) {
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			return
		}
		for _, i := range c.idx {
			be.Set(i, err)
			settled[i] = true
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range calls {
			if ctx.Err() != nil {
				// The caller has returned or is about to: publishing more
				// would deliver events it reports as failed.
				return
			}
			record(c, p.publish(c))
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	for i, ok := range settled {
		if !ok {
			be.Set(i, fmt.Errorf("outboxwatermill: publish not confirmed before the context ended (it may still complete): %w", context.Cause(ctx)))
		}
	}
	return be.ErrOrNil()
}

// plan maps events to messages and groups them into calls, recording in be
// the events that cannot be published at all (permanently).
func (p *Publisher) plan(ctx context.Context, events []core.Event, be *core.BatchError) []call {
	calls := make([]call, 0, len(events))
	byTopic := make(map[string]int)
	for i, e := range events {
		topic := p.topic(e)
		if topic == "" {
			be.Set(i, core.Permanent(fmt.Errorf("outboxwatermill: event %s (%s) has no topic: set its Destination or PublisherConfig.Topic", e.ID, e.Type)))
			continue
		}
		msg, err := MessageFromEvent(e)
		if err != nil {
			be.Set(i, core.Permanent(err))
			continue
		}
		msg.SetContext(ctx)
		if j, ok := byTopic[topic]; ok && p.group {
			calls[j].idx = append(calls[j].idx, i)
			calls[j].msgs = append(calls[j].msgs, msg)
			continue
		}
		byTopic[topic] = len(calls)
		calls = append(calls, call{topic: topic, idx: []int{i}, msgs: []*message.Message{msg}})
	}
	return calls
}

// publish runs one Watermill Publish call, turning a panic into an error: it
// runs on a goroutine of its own, where a panic would kill the process.
func (p *Publisher) publish(c call) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("outboxwatermill: watermill publisher panicked: %v", v)
		}
	}()
	if err := p.pub.Publish(c.topic, c.msgs...); err != nil {
		return fmt.Errorf("outboxwatermill: publish to topic %q: %w", c.topic, err)
	}
	return nil
}
