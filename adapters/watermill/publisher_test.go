package outboxwatermill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/wmtest"
)

// TestPublisherConformanceGoChannel runs the core.Publisher suite over
// Watermill's in-process GoChannel.
func TestPublisherConformanceGoChannel(t *testing.T) {
	t.Parallel()
	coretest.TestPublisher(t, coretest.PublisherHarness{New: func(t *testing.T) (core.Publisher, func() []core.Event) {
		gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
		ch, err := gc.Subscribe(context.Background(), "coretest")
		if err != nil {
			t.Fatal(err)
		}
		c := collect(ch)
		t.Cleanup(func() {
			_ = gc.Close()
			<-c.done
			if errs := c.Errs(); len(errs) > 0 {
				t.Errorf("messages that are not events: %v", errs)
			}
		})
		// The suite's events have various types and no Destination; one
		// topic gathers them all.
		pub, err := outboxwatermill.NewPublisher(gc, &outboxwatermill.PublisherConfig{
			Topic: func(core.Event) string { return "coretest" },
		})
		if err != nil {
			t.Fatal(err)
		}
		return pub, c.Events
	}})
}

// fakePublisher is a Watermill publisher whose behaviour per topic a test
// decides.
type fakePublisher struct {
	mu    sync.Mutex
	calls []fakeCall
	fail  map[string]error
	block chan struct{} // when set, Publish waits for it to be closed
	panic bool
}

type fakeCall struct {
	topic string
	uuids []string
	ctx   context.Context
}

func (p *fakePublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.panic {
		panic("boom")
	}
	c := fakeCall{topic: topic, ctx: msgs[0].Context()}
	for _, m := range msgs {
		c.uuids = append(c.uuids, m.UUID)
	}
	p.mu.Lock()
	p.calls = append(p.calls, c)
	block := p.block
	p.mu.Unlock()
	if block != nil {
		<-block
	}
	return p.fail[topic]
}

func (p *fakePublisher) Close() error { return nil }

func (p *fakePublisher) Calls() []fakeCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]fakeCall(nil), p.calls...)
}

func TestPublisherReportsEachEventsOutcome(t *testing.T) {
	t.Parallel()
	fake := &fakePublisher{fail: map[string]error{"bad": errors.New("broker says no")}}
	pub, err := outboxwatermill.NewPublisher(fake, &outboxwatermill.PublisherConfig{
		Topic: func(e core.Event) string {
			if e.Type == "lost" {
				return ""
			}
			return outboxwatermill.DefaultTopic(e)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	events := []core.Event{wmtest.Event("good", "a"), wmtest.Event("bad", "b"), wmtest.Event("", "by-type"), wmtest.Event("", "lost")}
	err = pub.Publish(context.Background(), events)
	var be *core.BatchError
	if !errors.As(err, &be) || len(be.Errs) != len(events) {
		t.Fatalf("err = %v, want a BatchError aligned with the 4 events", err)
	}
	if be.Errs[0] != nil || be.Errs[2] != nil {
		t.Errorf("published events reported failed: %v", be.Errs)
	}
	if be.Errs[1] == nil || core.IsPermanent(be.Errs[1]) {
		t.Errorf("broker failure: %v, want a transient error", be.Errs[1])
	}
	if !core.IsPermanent(be.Errs[3]) {
		t.Errorf("event without a topic: %v, want a permanent error", be.Errs[3])
	}
	calls := fake.Calls()
	if len(calls) != 3 || calls[0].topic != "good" || calls[1].topic != "bad" || calls[2].topic != "by-type" {
		t.Fatalf("calls = %+v, want one per event to good, bad, by-type", calls)
	}
	for i, c := range calls {
		if len(c.uuids) != 1 || c.uuids[0] != events[i].ID.String() {
			t.Errorf("call %d sent %v, want the event ID %s as message UUID", i, c.uuids, events[i].ID)
		}
	}
}

func TestPublisherGroupsByTopic(t *testing.T) {
	t.Parallel()
	fake := &fakePublisher{fail: map[string]error{"bad": errors.New("broker says no")}}
	pub, err := outboxwatermill.NewPublisher(fake, &outboxwatermill.PublisherConfig{GroupByTopic: true})
	if err != nil {
		t.Fatal(err)
	}
	events := []core.Event{wmtest.Event("a", "t"), wmtest.Event("bad", "t"), wmtest.Event("a", "t"), wmtest.Event("bad", "t")}
	err = pub.Publish(context.Background(), events)
	errs := core.EventErrors(len(events), err)
	if errs[0] != nil || errs[2] != nil || errs[1] == nil || errs[3] == nil {
		t.Fatalf("errs = %v, want topic a published and both bad events failed", errs)
	}
	calls := fake.Calls()
	if len(calls) != 2 || len(calls[0].uuids) != 2 || len(calls[1].uuids) != 2 {
		t.Fatalf("calls = %+v, want one call per topic with two messages each", calls)
	}
}

func TestPublisherReturnsWhenContextEnds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fake := &fakePublisher{block: release}
	pub, err := outboxwatermill.NewPublisher(fake, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	events := []core.Event{wmtest.Event("a", "t"), wmtest.Event("b", "t")}
	done := make(chan error, 1)
	go func() { done <- pub.Publish(ctx, events) }()
	var perr error
	select {
	case perr = <-done:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Publish did not return when its context ended")
	}
	close(release)
	errs := core.EventErrors(len(events), perr)
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("event %d: err = %v, want the context's error", i, err)
		}
	}
	// The blocked call completes in the background; the second event must
	// not be published after Publish reported it failed.
	wmtest.WaitFor(t, 5*time.Second, "the blocked publish to finish", func() bool { return len(fake.Calls()) >= 1 })
	if calls := fake.Calls(); len(calls) != 1 {
		t.Errorf("calls = %+v, want only the one under way when the context ended", calls)
	}
	if calls := fake.Calls(); calls[0].ctx.Err() == nil {
		t.Error("the message context is not the publish context")
	}
}

func TestPublisherTurnsPanicIntoError(t *testing.T) {
	t.Parallel()
	pub, err := outboxwatermill.NewPublisher(&fakePublisher{panic: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), []core.Event{wmtest.Event("a", "t")}); err == nil {
		t.Fatal("a panicking Watermill publisher reported success")
	}
}
