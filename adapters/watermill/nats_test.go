package outboxwatermill_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
)

// natsURL is the NATS server (with JetStream) CI starts.
const natsURL = "nats://127.0.0.1:4222"

// natsStream creates a JetStream stream of its own for one test, capturing
// "<name>.>", and deletes it when the test ends. Streams are created here
// rather than by watermill-nats' AutoProvision, which names a stream after
// the topic and so cannot take topics with dots in them.
func natsStream(t *testing.T) string {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS at %s is unreachable (%v): start it with JetStream (CI's .ci/run does)", natsURL, err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	name := "WMTEST_" + strings.ToUpper(strings.ReplaceAll(core.NewID().String(), "-", "")[20:])
	if _, err := js.AddStream(&nats.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: nats.MemoryStorage}); err != nil {
		t.Fatalf("create JetStream stream: %v", err)
	}
	t.Cleanup(func() {
		if err := js.DeleteStream(name); err != nil {
			t.Errorf("delete stream %s: %v", name, err)
		}
	})
	return name
}

func natsJetStreamConfig() wmnats.JetStreamConfig {
	return wmnats.JetStreamConfig{
		SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit()},
	}
}

func newNATSPublisher(t *testing.T) *wmnats.Publisher {
	t.Helper()
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{
		URL:       natsURL,
		JetStream: natsJetStreamConfig(),
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func newNATSSubscriber(t *testing.T) *wmnats.Subscriber {
	t.Helper()
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL:              natsURL,
		SubscribersCount: 1,
		AckWaitTimeout:   30 * time.Second,
		CloseTimeout:     5 * time.Second,
		JetStream:        natsJetStreamConfig(),
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func TestNATSJetStreamRoundTrip(t *testing.T) {
	t.Parallel()
	stream := natsStream(t)
	brokerRoundTrip(t, newNATSPublisher(t), newNATSSubscriber(t), stream+".orders")
}

// TestPublisherConformanceNATS runs the core.Publisher suite over NATS
// JetStream.
func TestPublisherConformanceNATS(t *testing.T) {
	t.Parallel()
	coretest.TestPublisher(t, coretest.PublisherHarness{New: func(t *testing.T) (core.Publisher, func() []core.Event) {
		stream := natsStream(t)
		topic := stream + ".coretest"
		sub := newNATSSubscriber(t)
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
		pub, err := outboxwatermill.NewPublisher(newNATSPublisher(t), &outboxwatermill.PublisherConfig{
			Topic: func(core.Event) string { return topic },
		})
		if err != nil {
			t.Fatal(err)
		}
		return pub, c.Events
	}})
}
