package core

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxTypeLength bounds Event.Type (and the other short text attributes) so a
// runaway value cannot bloat every row and every delivery header.
const MaxTypeLength = 255

// Event is one message in the outbox. Its ID is the idempotency key on every
// delivery: it never changes across retries, republishes or replays.
//
// On the wire an Event travels as a CloudEvents 1.0 message in binary content
// mode (see CloudEventHeaders).
type Event struct {
	// ID is stable across every delivery attempt. NewEvent sets a UUID v7.
	ID ID
	// Type names what happened, e.g. "order.confirmed". Required.
	Type string
	// SchemaVersion is the version of the payload's schema. Defaults to 1.
	SchemaVersion int
	// Source identifies the producing service (CloudEvents "source"). Optional.
	Source string
	// AggregateType and AggregateID name the entity the event is about. With
	// per-aggregate ordering on, events of one (AggregateType, AggregateID) are
	// delivered one at a time in Sequence order.
	AggregateType string
	AggregateID   string
	// Sequence is the event's position within its aggregate. Stores that
	// support ordering assign it at write time; leave it zero.
	Sequence int64
	// Payload is the event body: JSON. Required. Transports deliver it as
	// stored; a store may normalise it to equivalent JSON (PostgreSQL's jsonb
	// drops insignificant whitespace and reorders object keys), so consumers
	// must parse it rather than compare bytes.
	Payload json.RawMessage
	// Headers carry trace context (traceparent, tracestate, baggage) and custom
	// metadata. Keys are case-sensitive.
	Headers map[string]string
	// Destination optionally overrides the transport's routing for this event
	// (a URL, a URL group, a topic).
	Destination string
	// CreatedAt is set by the store when zero.
	CreatedAt time.Time
	// AvailableAt delays the first delivery; zero means CreatedAt (at once).
	// Stores claim due events in AvailableAt order, and a retry moves it
	// forward.
	AvailableAt time.Time
	// Attempts counts claims of this event so far, this one included when the
	// event comes from a Store's Claim.
	Attempts int
}

// NewEvent returns an event of the given type with a new UUID v7 ID and
// schema version 1. payload is encoded with encoding/json; pass a
// json.RawMessage to store bytes that already are JSON.
func NewEvent(eventType string, payload any) (Event, error) {
	e := Event{ID: NewID(), Type: eventType, SchemaVersion: 1}
	switch p := payload.(type) {
	case json.RawMessage:
		e.Payload = p
	case []byte:
		// Raw bytes are taken as JSON text rather than base64-encoded, which is
		// what a caller handing over bytes almost always means.
		e.Payload = json.RawMessage(p)
	default:
		b, err := json.Marshal(payload)
		if err != nil {
			return Event{}, &ValidationError{EventID: e.ID, Field: "Payload", Reason: fmt.Sprintf("cannot encode as JSON: %v", err)}
		}
		e.Payload = b
	}
	return e, e.Validate()
}

// Validate checks what every store and transport relies on: a non-nil ID, a
// type, a valid JSON payload and sane header names. It returns a
// *ValidationError. Size limits are the store's to enforce (see
// ValidatePayloadSize).
func (e *Event) Validate() error { return e.validate(true) }

// validate is Validate, parsing the payload only when checkJSON is set.
func (e *Event) validate(checkJSON bool) error {
	if e.ID.IsZero() {
		return &ValidationError{Field: "ID", Reason: "is the nil UUID: use core.NewID()", Err: ErrInvalidID}
	}
	if strings.TrimSpace(e.Type) == "" {
		return &ValidationError{EventID: e.ID, Field: "Type", Reason: "is empty: every event needs a type such as \"order.confirmed\""}
	}
	for _, f := range []struct{ name, value string }{
		{"Type", e.Type}, {"Source", e.Source}, {"AggregateType", e.AggregateType},
		{"AggregateID", e.AggregateID}, {"Destination", e.Destination},
	} {
		if len(f.value) > MaxTypeLength && f.name != "Destination" {
			return &ValidationError{EventID: e.ID, Field: f.name, Reason: fmt.Sprintf("is %d bytes long; the limit is %d", len(f.value), MaxTypeLength)}
		}
		if !utf8.ValidString(f.value) || strings.ContainsAny(f.value, "\x00\r\n") {
			return &ValidationError{EventID: e.ID, Field: f.name, Reason: "must be valid UTF-8 without NUL or line breaks"}
		}
	}
	if e.SchemaVersion < 0 {
		return &ValidationError{EventID: e.ID, Field: "SchemaVersion", Reason: "must not be negative"}
	}
	if e.Sequence < 0 {
		return &ValidationError{EventID: e.ID, Field: "Sequence", Reason: "must not be negative"}
	}
	if len(e.Payload) == 0 {
		return &ValidationError{EventID: e.ID, Field: "Payload", Reason: "is empty: use a JSON value such as {} or null"}
	}
	if checkJSON && !json.Valid(e.Payload) {
		return &ValidationError{EventID: e.ID, Field: "Payload", Reason: "is not valid JSON"}
	}
	for k, v := range e.Headers {
		if k == "" || strings.ContainsAny(k, "\x00\r\n: ") || !utf8.ValidString(k) {
			return &ValidationError{EventID: e.ID, Field: "Headers", Reason: fmt.Sprintf("header name %q must be non-empty UTF-8 without spaces, colons or line breaks", k)}
		}
		if strings.ContainsAny(v, "\x00\r\n") || !utf8.ValidString(v) {
			return &ValidationError{EventID: e.ID, Field: "Headers", Reason: fmt.Sprintf("value of header %q must be UTF-8 without NUL or line breaks", k)}
		}
	}
	return nil
}

// ValidatePayloadSize returns a *ValidationError matching ErrPayloadTooLarge
// when the payload is longer than limit bytes. A limit of zero or less means no
// limit.
func (e *Event) ValidatePayloadSize(limit int) error {
	if limit > 0 && len(e.Payload) > limit {
		return &ValidationError{
			EventID: e.ID, Field: "Payload", Err: ErrPayloadTooLarge,
			Reason: fmt.Sprintf("is %d bytes; the limit is %d: store large data elsewhere and send a reference", len(e.Payload), limit),
		}
	}
	return nil
}

// AggregateKey returns the key that groups an event with the others of its
// aggregate for ordering and flow control: "type/id", or "" when the event has
// no aggregate ID.
func (e *Event) AggregateKey() string {
	if e.AggregateID == "" {
		return ""
	}
	return e.AggregateType + "/" + e.AggregateID
}

// Clone returns a deep copy, so middleware may edit headers without touching
// the caller's event.
func (e Event) Clone() Event {
	if e.Payload != nil {
		e.Payload = append(json.RawMessage(nil), e.Payload...)
	}
	if e.Headers != nil {
		h := make(map[string]string, len(e.Headers))
		for k, v := range e.Headers {
			h[k] = v
		}
		e.Headers = h
	}
	return e
}
