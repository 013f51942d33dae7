package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// benchEvent is an event as a service typically writes one: an aggregate, a
// small JSON payload, a trace context and one custom header.
func benchEvent() core.Event {
	return core.Event{
		ID:            core.NewID(),
		Type:          "order.confirmed",
		SchemaVersion: 2,
		Source:        "billing",
		AggregateType: "order",
		AggregateID:   "12345",
		Sequence:      7,
		Payload:       json.RawMessage(`{"order": 12345, "status": "confirmed", "total": "99.95"}`),
		Headers: map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tenant":      "acme",
		},
		CreatedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
	}
}

// BenchmarkNewID measures the UUID v7 every event gets when it is written.
func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	var id core.ID
	for b.Loop() {
		id = core.NewID()
	}
	if id == (core.ID{}) {
		b.Fatal("NewID returned the zero ID")
	}
}

// BenchmarkValidate measures what Add and the relay check on every event,
// including the JSON payload's syntax.
func BenchmarkValidate(b *testing.B) {
	e := benchEvent()
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCloudEventHeaders measures the encoding of an event's attributes
// as CloudEvents binary-mode headers, which every transport adapter does
// once per event.
func BenchmarkCloudEventHeaders(b *testing.B) {
	e := benchEvent()
	b.ReportAllocs()
	var h map[string]string
	for b.Loop() {
		h = core.CloudEventHeaders(e)
	}
	if h[core.HeaderID] != e.ID.String() {
		b.Fatalf("ce-id = %q, want %q", h[core.HeaderID], e.ID)
	}
}

// BenchmarkEventFromCloudEventHeaders measures the consumer side: decoding
// a delivery's headers and body back into an event.
func BenchmarkEventFromCloudEventHeaders(b *testing.B) {
	e := benchEvent()
	h := core.CloudEventHeaders(e)
	b.ReportAllocs()
	var got core.Event
	var err error
	for b.Loop() {
		if got, err = core.EventFromCloudEventHeaders(h, e.Payload); err != nil {
			b.Fatal(err)
		}
	}
	if got.ID != e.ID || got.Sequence != e.Sequence {
		b.Fatalf("decoded %v seq %d, want %v seq %d", got.ID, got.Sequence, e.ID, e.Sequence)
	}
}
