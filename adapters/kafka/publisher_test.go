package outboxkafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/kafkatest"
)

// TestPublisherConformance runs the core.Publisher suite against a
// three-broker kfake cluster.
func TestPublisherConformance(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, 3, 3)
	coretest.TestPublisher(t, coretest.PublisherHarness{New: func(t *testing.T) (core.Publisher, func() []core.Event) {
		topic := newTopic("conformance")
		pub, err := outboxkafka.NewPublisher(newClient(t, c), &outboxkafka.PublisherConfig{
			Topic: func(core.Event) string { return topic },
		})
		if err != nil {
			t.Fatal(err)
		}
		col := kafkatest.Collect(t, c.Seeds(), topic)
		return pub, func() []core.Event { return events(t, col.Records()) }
	}})
}

// TestEveryEventArrivesOnceWithKeysAndHeaders publishes 600 events in
// concurrent batches, with and without aggregates, trace context and
// custom headers, and checks that each arrived exactly once, keyed by its
// aggregate (else its ID), with every attribute and header intact, and
// that an aggregate's events share one partition.
func TestEveryEventArrivesOnceWithKeysAndHeaders(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, 3, 6)
	topic := newTopic("once")
	col := kafkatest.Collect(t, c.Seeds(), topic)
	pub, err := outboxkafka.NewPublisher(newClient(t, c), &outboxkafka.PublisherConfig{
		Topic: func(core.Event) string { return topic },
	})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	const n = 600
	sent := make([]core.Event, n)
	for i := range sent {
		e, err := core.NewEvent(fmt.Sprintf("order.%d", i%5), json.RawMessage(fmt.Sprintf(`{"i":%d,"s":"é\"x"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		e.CreatedAt, e.Source, e.SchemaVersion = created.Add(time.Duration(i)*time.Millisecond), "checkout", 1+i%3
		if i%4 != 0 {
			e.AggregateType, e.AggregateID, e.Sequence = "order", fmt.Sprintf("o-%d", i%40), int64(i/40+1)
		}
		e.Headers = map[string]string{
			"traceparent":  fmt.Sprintf("00-%032x-%016x-01", i+1, i+1),
			"tracestate":   "vendor=x",
			"tenant":       "acme",
			"ce-lookalike": "kept as custom",
		}
		sent[i] = e
	}
	var wg sync.WaitGroup
	for b := 0; b < n; b += 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pub.Publish(context.Background(), sent[b:b+50]); err != nil {
				t.Errorf("Publish: %v", err)
			}
		}()
	}
	wg.Wait()
	if err := col.WaitFor(waitCtx(t, 20*time.Second), n); err != nil {
		t.Fatal(err)
	}
	recs := col.Records()
	if len(recs) != n {
		t.Fatalf("%d records for %d events", len(recs), n)
	}
	byID := make(map[core.ID]core.Event, n)
	for _, e := range sent {
		byID[e.ID] = e
	}
	seen := make(map[core.ID]bool, n)
	partitionOf := map[string]int32{}
	for _, r := range recs {
		got, err := outboxkafka.EventFromRecord(r)
		if err != nil {
			t.Fatalf("EventFromRecord: %v", err)
		}
		want, ok := byID[got.ID]
		if !ok {
			t.Fatalf("record for an event never sent: %s", got.ID)
		}
		if seen[got.ID] {
			t.Fatalf("event %s arrived twice", got.ID)
		}
		seen[got.ID] = true
		wantKey := want.AggregateID
		if wantKey == "" {
			wantKey = want.ID.String()
		}
		if string(r.Key) != wantKey {
			t.Errorf("event %s: key %q, want %q", got.ID, r.Key, wantKey)
		}
		if want.AggregateID != "" {
			if p, ok := partitionOf[want.AggregateID]; ok && p != r.Partition {
				t.Errorf("aggregate %s on partitions %d and %d", want.AggregateID, p, r.Partition)
			}
			partitionOf[want.AggregateID] = r.Partition
		}
		if !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("event %s: payload %s, want %s", got.ID, got.Payload, want.Payload)
		}
		got.Payload, want.Payload = nil, nil
		want.Destination = topic // EventFromRecord takes it from the topic
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("event %s came back as\n%+v\nwant\n%+v", got.ID, got, want)
		}
	}
	if len(partitionOf) != 30 { // i%40 for i%4 != 0
		t.Errorf("%d aggregates seen, want 30", len(partitionOf))
	}
	if err := col.Err(); err != nil {
		t.Error(err)
	}
}

// TestRecordHeadersFollowTheKafkaBinding pins the record's headers: the
// CloudEvents Kafka protocol binding's ce_ names, W3C trace names, custom
// headers under ce_x-, in a fixed order.
func TestRecordHeadersFollowTheKafkaBinding(t *testing.T) {
	t.Parallel()
	id, _ := core.ParseID("0190e6a4-6c2b-7cc8-8f6b-1a2b3c4d5e6f")
	e := core.Event{
		ID: id, Type: "order.placed", Source: "shop", SchemaVersion: 2,
		AggregateType: "order", AggregateID: "o-1", Sequence: 7,
		Payload:   json.RawMessage(`{"a":1}`),
		Headers:   map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	r := outboxkafka.RecordFromEvent(e, "orders")
	var got []string
	for _, h := range r.Headers {
		got = append(got, h.Key+"="+string(h.Value))
	}
	want := []string{
		"ce_aggregatetype=order", "ce_id=" + id.String(), "ce_schemaversion=2", "ce_sequence=7", "ce_source=shop",
		"ce_specversion=1.0", "ce_subject=o-1", "ce_time=2026-01-02T03:04:05Z", "ce_type=order.placed",
		"content-type=application/json",
		"traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"ce_x-tenant=acme",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("headers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Topic != "orders" || string(r.Key) != "o-1" || string(r.Value) != `{"a":1}` {
		t.Errorf("record topic %q key %q value %s", r.Topic, r.Key, r.Value)
	}

	// Refused on the way back: an attribute twice, no ID.
	dup := *r
	dup.Headers = append(append([]kgo.RecordHeader(nil), r.Headers...), kgo.RecordHeader{Key: "CE_TYPE", Value: []byte("order.refunded")})
	if _, err := outboxkafka.EventFromRecord(&dup); !errors.Is(err, core.ErrInvalidEvent) {
		t.Errorf("a record with ce_type and CE_TYPE decoded: %v", err)
	}
	noID := &kgo.Record{Topic: "orders", Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "ce_type", Value: []byte("x")}, {Key: "ce_specversion", Value: []byte("1.0")}}}
	if _, err := outboxkafka.EventFromRecord(noID); !errors.Is(err, core.ErrInvalidEvent) {
		t.Errorf("a record without ce_id decoded: %v", err)
	}
	// An HTTP spelling beside the Kafka one does not decide the type.
	http := *r
	http.Headers = append(append([]kgo.RecordHeader(nil), r.Headers...), kgo.RecordHeader{Key: "ce-type", Value: []byte("order.refunded")})
	if got, err := outboxkafka.EventFromRecord(&http); err != nil || got.Type != "order.placed" {
		t.Errorf("with a ce-type header beside ce_type: type %q, %v", got.Type, err)
	}
}

// TestPublishReportsEachOutcome: a batch holding an event whose own
// destination is no topic name (dead-lettered), one the routes send to an
// invalid topic (deferred as misconfiguration) and healthy ones gets one
// outcome per event, and only the healthy ones arrive.
func TestPublishReportsEachOutcome(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, 3, 3)
	topic := newTopic("outcomes")
	col := kafkatest.Collect(t, c.Seeds(), topic)
	pub, err := outboxkafka.NewPublisher(newClient(t, c), &outboxkafka.PublisherConfig{
		Topic: func(e core.Event) string {
			switch {
			case e.Destination != "":
				return e.Destination
			case e.Type == "misrouted":
				return "no spaces allowed"
			}
			return topic
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(typ, dest string) core.Event {
		e, err := core.NewEvent(typ, map[string]int{"n": 1})
		if err != nil {
			t.Fatal(err)
		}
		e.Destination = dest
		return e
	}
	batch := []core.Event{mk("ok", ""), mk("bad.destination", "topic/with/slashes"), mk("ok", ""), mk("misrouted", ""), mk("ok", "")}
	err = pub.Publish(context.Background(), batch)
	var be *core.BatchError
	if !errors.As(err, &be) || len(be.Errs) != len(batch) {
		t.Fatalf("Publish: %v, want a *core.BatchError of %d", err, len(batch))
	}
	for i, want := range []string{"ok", "permanent", "ok", "misconfigured", "ok"} {
		got := "ok"
		switch e := be.Errs[i]; {
		case core.IsPermanent(e):
			got = "permanent"
		case core.IsMisconfigured(e):
			got = "misconfigured"
		case e != nil:
			got = "transient: " + e.Error()
		}
		if got != want {
			t.Errorf("event %d (%s): %s, want %s", i, batch[i].Type, got, want)
		}
	}
	if err := col.WaitFor(waitCtx(t, 10*time.Second), 3); err != nil {
		t.Fatal(err)
	}
	for _, e := range events(t, col.Records()) {
		if e.Type != "ok" {
			t.Errorf("%s arrived", e.Type)
		}
	}
}

// TestNewPublisherRefusesUntrueClients: a client without idempotent
// writes, a transactional one and one that flushes manually are refused
// with errors that say what to drop.
func TestNewPublisherRefusesUntrueClients(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]kgo.Opt{
		"DisableIdempotentWrite": kgo.DisableIdempotentWrite(),
		"TransactionalID":        kgo.TransactionalID("relay"),
		"ManualFlushing":         kgo.ManualFlushing(),
	} {
		cl, err := outboxkafka.NewClient([]string{"127.0.0.1:1"}, opt, kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = outboxkafka.NewPublisher(cl, nil)
		cl.Close()
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: NewPublisher: %v", name, err)
		}
	}
	if _, err := outboxkafka.NewPublisher(nil, nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := outboxkafka.NewClient(nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("no seeds: %v", err)
	}
}
