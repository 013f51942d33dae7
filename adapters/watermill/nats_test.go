package outboxwatermill_test

import (
	"testing"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/wmtest"
)

func TestNATSJetStreamRoundTrip(t *testing.T) {
	t.Parallel()
	stream := wmtest.NATSStream(t)
	brokerRoundTrip(t, wmtest.NATSPublisher(t), wmtest.NATSSubscriber(t), stream+".orders")
}

// TestPublisherConformanceNATS runs the core.Publisher suite over NATS
// JetStream.
func TestPublisherConformanceNATS(t *testing.T) {
	t.Parallel()
	coretest.TestPublisher(t, coretest.PublisherHarness{New: func(t *testing.T) (core.Publisher, func() []core.Event) {
		stream := wmtest.NATSStream(t)
		topic := stream + ".coretest"
		sub := wmtest.NATSSubscriber(t)
		ch, err := sub.Subscribe(t.Context(), topic)
		if err != nil {
			t.Fatal(err)
		}
		c := collect(ch)
		t.Cleanup(func() {
			_ = sub.Close()
			<-c.done
			if errs := c.Errs(); len(errs) > 0 {
				t.Errorf("messages that are not events: %v", errs)
			}
		})
		pub, err := outboxwatermill.NewPublisher(wmtest.NATSPublisher(t), &outboxwatermill.PublisherConfig{
			Topic: func(core.Event) string { return topic },
		})
		if err != nil {
			t.Fatal(err)
		}
		return pub, c.Events
	}})
}
