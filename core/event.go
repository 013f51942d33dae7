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
	// Payload is the event body: JSON text, hence UTF-8. Required. Transports deliver it as
	// stored; a store may normalise it to equivalent JSON (PostgreSQL's jsonb
	// drops insignificant whitespace and reorders object keys), so consumers
	// must parse it rather than compare bytes.
	Payload json.RawMessage
	// Headers carry trace context (traceparent, tracestate, baggage) and custom
	// metadata. Keys are case-sensitive. Transports may send them as HTTP
	// headers, so Validate holds them to what HTTP can carry.
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
// type, a payload that is valid JSON and valid UTF-8, text attributes and
// headers that can travel as HTTP headers (valid UTF-8 without control
// characters, tab aside; header names without tabs, spaces or colons
// either). It returns a *ValidationError. Size limits are the store's to enforce (see
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
		if !headerText(f.value) {
			return &ValidationError{EventID: e.ID, Field: f.name, Reason: "must be valid UTF-8 without control characters (tab aside)"}
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
	if checkJSON {
		// json.Valid accepts any byte above 0x1f inside a string, but JSON
		// text must be UTF-8 (RFC 8259 §8.1), and outside strings it is
		// ASCII: checking the whole payload checks every string, in one
		// pass with an ASCII fast path.
		if !utf8.Valid(e.Payload) {
			return &ValidationError{EventID: e.ID, Field: "Payload", Reason: "is not valid UTF-8, which JSON text must be (RFC 8259 §8.1): encode binary data as base64"}
		}
		if !json.Valid(e.Payload) {
			return &ValidationError{EventID: e.ID, Field: "Payload", Reason: "is not valid JSON"}
		}
	}
	for k, v := range e.Headers {
		if k == "" || strings.ContainsAny(k, ": \t") || !headerText(k) {
			return &ValidationError{EventID: e.ID, Field: "Headers", Reason: fmt.Sprintf("header name %q must be non-empty UTF-8 without spaces, colons or control characters", k)}
		}
		if !headerText(v) {
			return &ValidationError{EventID: e.ID, Field: "Headers", Reason: fmt.Sprintf("value of header %q must be UTF-8 without control characters (tab aside)", k)}
		}
	}
	return nil
}

// headerText reports whether s can travel as an HTTP header value, as every
// attribute and header of an event does in CloudEvents binary mode: valid
// UTF-8 with no control character but tab (RFC 9110 §5.5; net/http refuses
// to send the others, and CR or LF would split the header).
func headerText(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	return ascii || utf8.ValidString(s)
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
