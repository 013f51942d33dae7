package outboxwatermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/outboxkit/outboxkit/adapters/memory"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// outboxFeatures declares what the TxPublisher + OutboxSubscriber pair
// offers, for Watermill's universal Pub/Sub suite.
var outboxFeatures = tests.Features{
	// One outbox row is published once, to one of the subscriptions of its
	// topic: every subscriber is in the same (single) group.
	ConsumerGroups: false,
	// At-least-once: a lease that expires, or an Ack after AckTimeout,
	// redelivers.
	ExactlyOnceDelivery: false,
	// Events are claimed oldest first, but a nacked event is retried after
	// a backoff while later ones go on; and several subscriptions compete.
	// This also skips TestNoAck, whose "nothing until Ack" holds per
	// subscription (TestOutboxSubscriberWaitsForAck checks it).
	GuaranteedOrder:                     false,
	GuaranteedOrderWithSingleSubscriber: false,
	// Events live in the store, not in the subscriber: a new subscriber
	// picks up what an earlier one left.
	Persistent: true,
	// Any number of subscriber instances share the store.
	RequireSingleInstance: false,
	// A published event is never delivered again to later subscribers.
	NewSubscriberReceivesOldMessages: false,
	// The message context does not travel through the database (its trace
	// context does, as headers).
	ContextPreserved: false,
	// The full-size suite publishes tens of thousands of messages through
	// one-at-a-time acknowledgements; the short sizes exercise the same
	// paths in seconds.
	ForceShort: true,
	// No RestartServiceCommand: restarting PostgreSQL would disturb every
	// other package's tests. Reconnects are the pgx pool's business.
}

// suitePublisherConfig adapts the publisher to the suite's messages:
//   - their payloads are not JSON ("x"), so the publisher wraps them and the
//     subscriber unwraps them, which the suite's payload checks verify;
//   - TestConcurrentSubscribeMultipleTopics publishes copies of one message
//     (one UUID) to twenty topics, and the outbox keys events by ID alone,
//     so every event gets a fresh ID and the UUID travels in a header (the
//     suite checks the UUIDs it receives).
var suitePublisherConfig = &outboxwatermill.TxPublisherConfig{WrapNonJSON: true, EventID: outboxwatermill.FreshEventID}

func TestPubSubMemory(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(nil)
	testPubSub(t, store, func() (*outboxwatermill.TxPublisher, error) {
		return outboxwatermill.NewTxPublisher(memoryAdder(store), struct{}{}, suitePublisherConfig)
	})
}

func TestPubSubPostgres(t *testing.T) {
	t.Parallel()
	pool, store := newPostgresStore(t, 20)
	testPubSub(t, store, func() (*outboxwatermill.TxPublisher, error) {
		// The pool as the "transaction": each Publish commits on its own.
		return outboxwatermill.NewTxPublisher[postgres.DBTX](store, pool, suitePublisherConfig)
	})
}

// testPubSub runs Watermill's suite over TxPublishers from newPub and
// OutboxSubscribers of store.
func testPubSub(t *testing.T, store core.Store, newPub func() (*outboxwatermill.TxPublisher, error)) {
	tests.TestPubSub(t, outboxFeatures, func(t *testing.T) (message.Publisher, message.Subscriber) {
		pub, err := newPub()
		if err != nil {
			t.Fatal(err)
		}
		sub, err := outboxwatermill.NewOutboxSubscriber(store, fastSubscriber())
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}, nil)
}
