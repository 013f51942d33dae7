package outboxwatermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"

	"github.com/outboxkit/outboxkit/core"
)

// amqpURI is the RabbitMQ server CI starts.
const amqpURI = "amqp://guest:guest@127.0.0.1:5672/"

// TestAMQPRoundTrip relays through RabbitMQ: a non-durable, auto-deleted
// queue per test, so no test leaves a queue behind.
func TestAMQPRoundTrip(t *testing.T) {
	t.Parallel()
	cfg := amqp.NewNonDurableQueueConfig(amqpURI)
	cfg.Queue.AutoDelete = true
	pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("RabbitMQ at %s is unreachable (%v): start it (CI's .ci/run does)", amqpURI, err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	topic := "wmtest-" + core.NewID().String()
	// The queue must exist before the relay publishes, or RabbitMQ drops
	// the messages: Subscribe (in brokerRoundTrip) declares it, and so does
	// this, explicitly.
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	brokerRoundTrip(t, pub, sub, topic)
}
