package wmtest

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
)

// Traceparent is a valid W3C traceparent for events and metadata in tests.
const Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// Event returns a valid event of type typ bound for destination, with an
// empty JSON object as its payload.
func Event(destination, typ string) core.Event {
	return core.Event{ID: core.NewID(), Type: typ, Destination: destination, SchemaVersion: 1, Payload: []byte(`{}`)}
}

// WaitFor polls cond until it holds, failing the test at the deadline:
// tests wait on conditions, never on fixed sleeps.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// Receive returns the next message from ch, failing the test when ch is
// closed or nothing arrives within timeout.
func Receive(t testing.TB, ch <-chan *message.Message, timeout time.Duration) *message.Message {
	t.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case msg, ok := <-ch:
		if !ok {
			t.Fatal("subscription channel closed")
		}
		return msg
	case <-tm.C:
		t.Fatalf("no message within %s", timeout)
	}
	return nil
}

// NoMessage fails the test if a message is waiting on ch, reporting it as
// what (a forged delivery, say). It does not wait: call it once whatever
// could have sent one has returned.
func NoMessage(t testing.TB, ch <-chan *message.Message, what string) {
	t.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			t.Fatalf("%s was handed out: %s", what, m.UUID)
		}
	default:
	}
}
