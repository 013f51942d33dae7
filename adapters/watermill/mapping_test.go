package outboxwatermill_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/wmtest"
)

func fullEvent() core.Event {
	return core.Event{
		ID:            core.NewID(),
		Type:          "order.confirmed",
		SchemaVersion: 3,
		Source:        "shop",
		AggregateType: "order",
		AggregateID:   "42",
		Sequence:      7,
		Payload:       json.RawMessage(`{"total":12.5}`),
		Headers: map[string]string{
			"traceparent":    wmtest.Traceparent,
			"tracestate":     "vendor=x",
			"correlation_id": "corr-1",
			"ce-custom":      "kept prefixed",
		},
		Destination: "orders",
		CreatedAt:   time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC),
	}
}

func TestMessageFromEventCarriesEveryAttribute(t *testing.T) {
	e := fullEvent()
	msg, err := outboxwatermill.MessageFromEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	if msg.UUID != e.ID.String() {
		t.Errorf("UUID = %q, want the event ID %s", msg.UUID, e.ID)
	}
	if string(msg.Payload) != string(e.Payload) {
		t.Errorf("payload = %s, want %s", msg.Payload, e.Payload)
	}
	want := map[string]string{
		"ce-id":            e.ID.String(),
		"ce-type":          "order.confirmed",
		"ce-source":        "shop",
		"ce-specversion":   "1.0",
		"ce-subject":       "42",
		"ce-aggregatetype": "order",
		"ce-schemaversion": "3",
		"ce-sequence":      "7",
		"ce-time":          "2030-01-02T03:04:05.000006Z",
		"content-type":     "application/json",
		"traceparent":      wmtest.Traceparent,
		"tracestate":       "vendor=x",
		// Custom headers under their own names, so Watermill middleware
		// (CorrelationID) finds them...
		"correlation_id": "corr-1",
		// ...unless the name would pass for an attribute.
		"ce-x-ce-custom": "kept prefixed",
	}
	for k, v := range want {
		if got := msg.Metadata.Get(k); got != v {
			t.Errorf("metadata %s = %q, want %q", k, got, v)
		}
	}
	if len(msg.Metadata) != len(want) {
		t.Errorf("metadata has %d entries, want %d: %v", len(msg.Metadata), len(want), msg.Metadata)
	}
}

func TestEventFromMessageInvertsMessageFromEvent(t *testing.T) {
	e := fullEvent()
	msg, err := outboxwatermill.MessageFromEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := outboxwatermill.EventFromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Type != e.Type || got.Source != e.Source || got.AggregateID != e.AggregateID ||
		got.AggregateType != e.AggregateType || got.SchemaVersion != e.SchemaVersion || got.Sequence != e.Sequence ||
		!got.CreatedAt.Equal(e.CreatedAt) || string(got.Payload) != string(e.Payload) {
		t.Errorf("round trip changed the event:\n got %+v\nwant %+v", got, e)
	}
	if len(got.Headers) != len(e.Headers) {
		t.Errorf("headers = %v, want %v", got.Headers, e.Headers)
	}
	for k, v := range e.Headers {
		if got.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, got.Headers[k], v)
		}
	}
}

func TestEventFromMessageUsesUUIDWithoutCEID(t *testing.T) {
	id := core.NewID()
	msg := message.NewMessage(id.String(), []byte(`{}`))
	msg.Metadata.Set("Ce-Type", "x.happened") // canonicalised by an HTTP hop
	msg.Metadata.Set("tenant", "t1")
	e, err := outboxwatermill.EventFromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != id || e.Type != "x.happened" || e.Headers["tenant"] != "t1" {
		t.Fatalf("got %+v", e)
	}
}

func TestEventFromMessageRefusesNonEvents(t *testing.T) {
	for name, msg := range map[string]*message.Message{
		"no type":          message.NewMessage(core.NewID().String(), []byte(`{}`)),
		"UUID not UUID":    withMeta(message.NewMessage("01HZX", []byte(`{}`)), "ce-type", "t"),
		"payload not JSON": withMeta(message.NewMessage(core.NewID().String(), []byte(`x`)), "ce-type", "t"),
	} {
		if _, err := outboxwatermill.EventFromMessage(msg); !errors.Is(err, core.ErrInvalidEvent) {
			t.Errorf("%s: err = %v, want one matching core.ErrInvalidEvent", name, err)
		}
	}
}

func withMeta(msg *message.Message, kv ...string) *message.Message {
	for i := 0; i+1 < len(kv); i += 2 {
		msg.Metadata.Set(kv[i], kv[i+1])
	}
	return msg
}

func TestMessageFromEventUnwrapsWrappedPayloadAndUUID(t *testing.T) {
	e := core.Event{
		ID: core.NewID(), Type: "t", Payload: json.RawMessage(`"eA=="`),
		Headers: map[string]string{
			outboxwatermill.HeaderPayloadEncoding: outboxwatermill.PayloadEncodingBase64,
			outboxwatermill.HeaderMessageUUID:     "01HZXULID",
		},
	}
	msg, err := outboxwatermill.MessageFromEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Payload) != "x" || msg.UUID != "01HZXULID" || msg.Metadata.Get("ce-id") != e.ID.String() {
		t.Fatalf("payload %q, UUID %q, ce-id %q", msg.Payload, msg.UUID, msg.Metadata.Get("ce-id"))
	}
	for k := range msg.Metadata {
		if k == outboxwatermill.HeaderPayloadEncoding || k == outboxwatermill.HeaderMessageUUID ||
			k == core.HeaderCustomPrefix+outboxwatermill.HeaderPayloadEncoding || k == core.HeaderCustomPrefix+outboxwatermill.HeaderMessageUUID {
			t.Errorf("bookkeeping header %q leaked into metadata", k)
		}
	}

	e.Payload = json.RawMessage(`{"not":"a string"}`)
	if _, err := outboxwatermill.MessageFromEvent(e); !errors.Is(err, core.ErrInvalidEvent) {
		t.Fatalf("malformed wrapped payload: err = %v, want core.ErrInvalidEvent", err)
	}
}
