package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outboxkit/core"
)

// PublisherConfig configures a Publisher. The zero value is usable.
type PublisherConfig struct {
	// Topic picks the topic of an event. Defaults to DefaultTopic: the
	// event's Destination, else its Type.
	Topic func(e core.Event) string

	// Key picks the record key of an event, which decides its partition.
	// Defaults to DefaultKey: the aggregate ID, else the event ID. Keep
	// an aggregate's events on one key, or consumers lose their order.
	Key func(e core.Event) []byte
}

// Publisher is a core.Publisher producing each event as one Kafka record
// (see the package documentation for the record's key, headers and
// topic). It is safe for concurrent use, as the relay's concurrent
// batches need.
//
// Publisher does not own its client: close the client after the relay has
// stopped.
type Publisher struct {
	cl    *kgo.Client
	topic func(core.Event) string
	key   func(core.Event) []byte
}

var _ core.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher producing through cl. cfg may be nil.
// It refuses a client whose settings would make its outcomes untrue: one
// with idempotent writes disabled, a transactional one, or one that
// flushes manually.
func NewPublisher(cl *kgo.Client, cfg *PublisherConfig) (*Publisher, error) {
	if err := checkClient(cl); err != nil {
		return nil, err
	}
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Topic == nil {
		c.Topic = DefaultTopic
	}
	if c.Key == nil {
		c.Key = DefaultKey
	}
	return &Publisher{cl: cl, topic: c.Topic, key: c.Key}, nil
}

// Publish implements core.Publisher. It produces every event of the batch
// at once, in batch order (so an aggregate's events keep their order on
// its partition), and returns when each has its produce result or ctx
// ends; events still waiting then are reported failed with ctx's error.
func (p *Publisher) Publish(ctx context.Context, events []core.Event) error {
	if len(events) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	be := core.NewBatchError(len(events))

	// Results arrive on kgo's promise goroutine; this one reads them
	// under mu until every event has one or ctx ends, after which late
	// results are dropped (the relay has moved on).
	var (
		mu        sync.Mutex
		pending   = 0
		got       = make([]bool, len(events))
		abandoned bool
		done      = make(chan struct{})
	)
	finish := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			return
		}
		be.Set(i, err)
		got[i] = true
		pending--
		if pending == 0 {
			close(done)
		}
	}
	records := make([]*kgo.Record, len(events))
	for i, e := range events {
		topic := p.topic(e)
		if err := checkTopic(e, topic); err != nil {
			be.Set(i, err)
			continue
		}
		records[i] = recordFromEvent(e, topic, p.key(e))
		pending++
	}
	if pending == 0 {
		return be.ErrOrNil()
	}
	for i, r := range records {
		if r == nil {
			continue
		}
		p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			finish(i, classify(r.Topic, err))
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		if pending > 0 {
			abandoned = true
			for i, r := range records {
				if r != nil && !got[i] {
					be.Set(i, fmt.Errorf("kafka: no produce result before the publish ended: %w", ctx.Err()))
				}
			}
		}
		mu.Unlock()
	}
	return be.ErrOrNil()
}

// checkTopic says whether topic can carry e, as Kafka names topics: 1 to
// 249 of letters, digits, '.', '_' and '-', not "." or "..".
func checkTopic(e core.Event, topic string) error {
	reason := ""
	switch {
	case topic == "":
		return core.Misconfigured(errNoTopic)
	case len(topic) > 249:
		reason = "is longer than Kafka's 249 characters"
	case topic == "." || topic == "..":
		reason = "is not a topic name Kafka allows"
	default:
		for _, c := range topic {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				reason = fmt.Sprintf("has %q: Kafka topic names hold only letters, digits, '.', '_' and '-'", c)
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	err := fmt.Errorf("kafka: topic %q %s", topic, reason)
	if topic == e.Destination {
		// The event's own destination: no configuration change mends it.
		return core.Permanent(err)
	}
	return core.Misconfigured(fmt.Errorf("%w: fix the routes or the destination", err))
}

// classify marks a produce error by its cause: errors the record itself
// causes are permanent, errors of the relay's configuration (rights, a
// missing topic) deferred as misconfiguration, everything else (lost
// brokers, leader changes, timeouts) transient.
func classify(topic string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("kafka: produce to %s: %w", topic, err)
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.InvalidRequiredAcks):
		return core.Permanent(wrapped)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.PolicyViolation):
		return core.Misconfigured(wrapped)
	}
	return wrapped
}
