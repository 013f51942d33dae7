package outboxwatermill

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
)

// Bookkeeping headers TxPublisher may set on an event, and the payload
// encoding it uses for payloads that are not JSON.
const (
	// HeaderPayloadEncoding is the event header TxPublisher sets on an event
	// whose payload it wrapped. It never appears in message metadata: the
	// subscribers and Publisher unwrap the payload and drop the header, so a
	// Watermill consumer gets back the bytes the producer published.
	HeaderPayloadEncoding = "outboxkit-payload-encoding"
	// PayloadEncodingBase64 marks a payload stored as a JSON string holding
	// the standard base64 encoding of the original bytes.
	PayloadEncodingBase64 = "base64"

	// HeaderMessageUUID is the event header TxPublisher sets when the event
	// ID is not the message UUID (a UUID that is not one, or an
	// EventID function that chose another): MessageFromEvent restores the
	// message UUID from it, so Watermill code sees the UUID it published,
	// while the ce-id metadata still carries the event ID. Like
	// HeaderPayloadEncoding it never appears in message metadata.
	HeaderMessageUUID = "outboxkit-message-uuid"
)

// MessageFromEvent returns the Watermill message that carries e: the message
// UUID is the event ID (or the UUID TxPublisher recorded in
// HeaderMessageUUID), the payload is the event payload (unwrapped when
// TxPublisher wrapped it), and the metadata holds the CloudEvents attributes
// (core.CloudEventHeaders: ce-id, ce-type, ce-source, ce-specversion,
// ce-time, ce-subject, ce-schemaversion, ce-aggregatetype, ce-sequence,
// content-type), the W3C trace context (traceparent, tracestate, baggage)
// and the event's custom headers.
//
// Custom headers travel under their own names, not under CloudEvents'
// "ce-x-" prefix, because Watermill code reads metadata by name: a
// "correlation_id" set by Watermill's CorrelationID middleware on the
// producing side must still be "correlation_id" on the consuming side. Only
// a custom header whose own name would be mistaken for an attribute (one
// starting with "ce-", "content-type", a trace header name) keeps the prefix.
//
// It fails, with an error matching core.ErrInvalidEvent, only when a wrapped
// payload cannot be unwrapped.
func MessageFromEvent(e core.Event) (*message.Message, error) {
	payload, err := unwrapPayload(e)
	if err != nil {
		return nil, err
	}
	md := make(message.Metadata, 10+len(e.Headers))
	for k, v := range core.CloudEventHeaders(e) {
		if bare, ok := strings.CutPrefix(k, core.HeaderCustomPrefix); ok {
			if bare == HeaderPayloadEncoding || bare == HeaderMessageUUID {
				continue
			}
			if !reservedName(bare) {
				k = bare
			}
		}
		md[k] = v
	}
	uuid := e.ID.String()
	if u := e.Headers[HeaderMessageUUID]; u != "" {
		uuid = u
	}
	msg := message.NewMessage(uuid, payload)
	msg.Metadata = md
	return msg, nil
}

// EventFromMessage rebuilds the event a message carries, the inverse of
// MessageFromEvent: attributes come from the CloudEvents metadata, the ID
// from ce-id (the message UUID when ce-id is absent), and every other
// metadata entry becomes a custom header. The payload must be JSON.
//
// A consumer uses it to hand a message to outboxkit's consumer side, a
// core.Deduper or a core.Handler, keyed by the event ID. It returns a
// *core.ValidationError (matching core.ErrInvalidEvent) when the message does
// not carry a valid event: no type, an ID that is not a UUID, a payload that
// is not JSON.
//
// Metadata a transport added on the way (broker-specific keys) comes back as
// custom headers too, since it cannot be told from the producer's own.
func EventFromMessage(msg *message.Message) (core.Event, error) {
	h := make(map[string]string, len(msg.Metadata)+2)
	// Attributes first, lower-cased, so that two spellings of one attribute
	// cannot race in map order; custom names never overwrite a "ce-x-"
	// spelling of themselves.
	for k, v := range msg.Metadata {
		if !reservedName(k) || ownHeader(k) {
			continue
		}
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, core.HeaderCustomPrefix) {
			// Custom header names keep their case.
			h[core.HeaderCustomPrefix+k[len(core.HeaderCustomPrefix):]] = v
			continue
		}
		h[lk] = v
	}
	for k, v := range msg.Metadata {
		if reservedName(k) || ownHeader(k) {
			continue
		}
		ck := core.HeaderCustomPrefix + k
		if _, dup := h[ck]; !dup {
			h[ck] = v
		}
	}
	if _, ok := h[core.HeaderSpecVersion]; !ok {
		h[core.HeaderSpecVersion] = core.SpecVersion
	}
	if _, ok := h[core.HeaderID]; !ok {
		h[core.HeaderID] = msg.UUID
	}
	e, err := core.EventFromCloudEventHeaders(h, append([]byte(nil), msg.Payload...))
	if err == nil && e.Destination == "" {
		// A message does not carry its topic; a Router puts the subscribed
		// topic in the message's context ("" elsewhere).
		e.Destination = message.SubscribeTopicFromCtx(msg.Context())
	}
	return e, err
}

// ownHeader reports whether k is one of this package's bookkeeping headers,
// which never travel as metadata.
func ownHeader(k string) bool {
	return strings.EqualFold(k, HeaderPayloadEncoding) || strings.EqualFold(k, HeaderMessageUUID)
}

// reservedName reports whether a metadata name belongs to the CloudEvents or
// trace-context vocabulary (or to this package), so it cannot carry a custom
// header under its bare name.
func reservedName(k string) bool {
	lk := strings.ToLower(k)
	switch lk {
	case core.HeaderContentType, "traceparent", "tracestate", "baggage", HeaderPayloadEncoding, HeaderMessageUUID:
		return true
	}
	return strings.HasPrefix(lk, "ce-")
}

// wrapPayload returns p as a JSON payload: unchanged when it is JSON,
// otherwise, if wrap is set, as a JSON string of its base64 encoding (and
// true), otherwise an error.
func wrapPayload(p []byte, wrap bool) (json.RawMessage, bool, error) {
	if json.Valid(p) {
		return append(json.RawMessage(nil), p...), false, nil
	}
	if !wrap {
		return nil, false, ErrNonJSONPayload
	}
	b, _ := json.Marshal(base64.StdEncoding.EncodeToString(p)) // a string always marshals
	return b, true, nil
}

// unwrapPayload returns e's payload as the producer published it.
func unwrapPayload(e core.Event) ([]byte, error) {
	enc, ok := e.Headers[HeaderPayloadEncoding]
	if !ok {
		return append([]byte(nil), e.Payload...), nil
	}
	bad := func(reason string) error {
		return &core.ValidationError{EventID: e.ID, Field: "Payload", Reason: reason}
	}
	if enc != PayloadEncodingBase64 {
		return nil, bad(fmt.Sprintf("header %s is %q; the only encoding known is %q", HeaderPayloadEncoding, enc, PayloadEncodingBase64))
	}
	var s string
	if err := json.Unmarshal(e.Payload, &s); err != nil {
		return nil, bad("is marked base64-wrapped but is not a JSON string")
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, bad("is marked base64-wrapped but is not valid base64")
	}
	return b, nil
}
