package wmtest

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"
)

// NATSURL is the NATS server (with JetStream) CI starts.
const NATSURL = "nats://127.0.0.1:4222"

// NATSStream creates a JetStream stream of its own for one test, capturing
// "<name>.>", and deletes it when the test ends: publish to topics
// "<name>.<anything>". Streams are created here rather than by
// watermill-nats' AutoProvision, which names a stream after the topic and
// so cannot take topics with dots in them.
func NATSStream(t testing.TB) string {
	t.Helper()
	nc, err := nats.Connect(NATSURL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS at %s is unreachable (%v): start it with JetStream (CI's .ci/run does)", NATSURL, err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	name := "TEST_" + rand.Text()[:12] // base32: upper-case letters and digits
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

// NATSJetStreamConfig is the JetStream configuration of NATSPublisher and
// NATSSubscriber: every message of the stream, each acknowledged
// explicitly.
func NATSJetStreamConfig() wmnats.JetStreamConfig {
	return wmnats.JetStreamConfig{
		SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit()},
	}
}

// NATSPublisher returns a watermill-nats JetStream publisher, closed when
// the test ends.
func NATSPublisher(t testing.TB) *wmnats.Publisher {
	t.Helper()
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{
		URL:       NATSURL,
		JetStream: NATSJetStreamConfig(),
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// NATSSubscriber returns a watermill-nats JetStream subscriber, closed when
// the test ends.
func NATSSubscriber(t testing.TB) *wmnats.Subscriber {
	t.Helper()
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL:              NATSURL,
		SubscribersCount: 1,
		AckWaitTimeout:   30 * time.Second,
		CloseTimeout:     5 * time.Second,
		JetStream:        NATSJetStreamConfig(),
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}
