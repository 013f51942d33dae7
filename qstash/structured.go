package qstash

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outboxkit/outboxkit/core"
)

// ContentTypeStructured is the media type of a CloudEvents 1.0
// structured-mode JSON message: the Content-Type the publisher sends by
// default and the one the Receiver reads the event from.
const ContentTypeStructured = "application/cloudevents+json"

// Why structured mode is the default: QStash signs the delivery's URL and
// body, never its headers. In binary mode the event's identity and type
// travel as forwarded ce-* headers, so whoever captures one delivery can
// send its token and body again, within the token's lifetime, with another
// ce-id (the Deduper applies it again) or another ce-type (another handler
// runs). In structured mode every attribute the consumer keys on is inside
// the signed body.
//
// The document is CloudEvents' JSON format: the attributes as top-level
// members named as in binary mode without the "ce-" prefix (id, type,
// source, specversion, time, subject and the extensions aggregatetype,
// schemaversion and sequence), the W3C trace context as the distributed
// tracing extension's traceparent, tracestate (and baggage) members, and the
// payload as "data" (or "data_base64" when it is not JSON). Custom headers,
// whose names need not be valid CloudEvents attribute names, travel in one
// string-valued extension, outboxheaders, holding a JSON object of strings:
// a value CloudEvents SDKs accept (an object-valued extension they refuse).

// structuredHeaders is the extension carrying an event's custom headers.
const structuredHeaders = "outboxheaders"

// EncodeStructuredEvent returns e as a CloudEvents structured-mode JSON
// document, the body the publisher sends by default. The attributes are
// those of core.CloudEventHeaders, in a fixed order, so one event always
// encodes to the same bytes. It returns a *core.ValidationError for an
// event whose text is not valid UTF-8.
func EncodeStructuredEvent(e core.Event) ([]byte, error) { return appendStructured(nil, &e) }

// appendStructured appends e's structured-mode document to b.
func appendStructured(b []byte, e *core.Event) ([]byte, error) {
	ce := core.CloudEventHeaders(*e)
	var restBuf [8]string
	trace, custom := restBuf[:0], []string(nil)
	for k, v := range ce {
		if !utf8.ValidString(v) {
			return b, &core.ValidationError{EventID: e.ID, Field: "Headers", Reason: fmt.Sprintf("value of %q is not valid UTF-8, which JSON cannot carry unchanged", k)}
		}
		switch {
		case knownAttribute(k):
		case strings.HasPrefix(k, core.HeaderCustomPrefix):
			name := k[len(core.HeaderCustomPrefix):]
			if name == "" || !utf8.ValidString(name) {
				return b, &core.ValidationError{EventID: e.ID, Field: "Headers", Reason: fmt.Sprintf("header name %q must be non-empty valid UTF-8", name)}
			}
			custom = append(custom, k)
		default: // trace context, under its W3C name
			trace = append(trace, k)
		}
	}
	slices.Sort(trace)
	slices.Sort(custom)

	b = append(b, '{')
	first := true
	member := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	str := func(name, value string) {
		member(name)
		b = append(b, '"')
		b = appendJSONEscaped(b, value)
		b = append(b, '"')
	}
	for _, k := range attributeOrder {
		if v, ok := ce[k]; ok {
			str(k[len("ce-"):], v)
		}
	}
	for _, k := range trace {
		str(k, ce[k])
	}
	if len(custom) > 0 {
		// The object is built first, then written as a JSON string.
		inner := make([]byte, 0, 64)
		inner = append(inner, '{')
		for i, k := range custom {
			if i > 0 {
				inner = append(inner, ',')
			}
			inner = append(inner, '"')
			inner = appendJSONEscaped(inner, k[len(core.HeaderCustomPrefix):])
			inner = append(inner, '"', ':', '"')
			inner = appendJSONEscaped(inner, ce[k])
			inner = append(inner, '"')
		}
		inner = append(inner, '}')
		member(structuredHeaders)
		b = append(b, '"')
		b = appendJSONEscaped(b, inner)
		b = append(b, '"')
	}
	str("datacontenttype", contentTypeJSON)
	if utf8.Valid(e.Payload) && json.Valid(e.Payload) {
		member("data")
		b = append(b, e.Payload...)
	} else {
		// Not JSON (a row written by plain SQL into a column that does not
		// check): carried byte for byte, as CloudEvents carries binary data.
		member("data_base64")
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, e.Payload)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// DecodeStructuredEvent rebuilds an event from a CloudEvents structured-mode
// JSON document (see EncodeStructuredEvent). Only the document is read: a
// Receiver calls it on the signed body and ignores any ce-* header, which
// QStash does not sign. It returns a *core.ValidationError (matching
// core.ErrInvalidEvent) when the document is not a JSON object, repeats a
// member, or carries a missing or malformed attribute; the attributes are
// checked by core.EventFromCloudEventHeaders, the same rules as binary
// mode. Members it does not know (other CloudEvents extensions) are
// ignored.
func DecodeStructuredEvent(body []byte) (core.Event, error) {
	bad := func(field, reason string) (core.Event, error) {
		return core.Event{}, &core.ValidationError{Field: field, Reason: reason}
	}
	// JSON text is UTF-8 (RFC 8259 §8.1); encoding/json would replace
	// invalid bytes silently, so the event would differ from what was sent.
	if !utf8.Valid(body) {
		return bad("body", "is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad("body", "is not a JSON object: a CloudEvents structured-mode message is one")
	}
	attrs := make(map[string]string, 16)
	seen := make(map[string]bool, 16)
	var data []byte
	var haveData, haveBase64 bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("body", "is not valid JSON: "+err.Error())
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return bad("body", "is not valid JSON: "+err.Error())
		}
		// encoding/json keeps the last of two equal names, other parsers
		// the first: a document that repeats one means different things to
		// different consumers.
		if seen[name] {
			return bad(name, "appears twice: send each member once")
		}
		seen[name] = true
		if string(raw) == "null" && name != "data" {
			continue // CloudEvents: a null attribute is an absent one
		}
		switch name {
		case "data":
			data, haveData = raw, true
		case "data_base64":
			s, err := jsonString(raw)
			if err != nil {
				return bad(name, err.Error())
			}
			if data, err = base64.StdEncoding.DecodeString(s); err != nil {
				return bad(name, "is not base64")
			}
			haveBase64 = true
		case structuredHeaders:
			s, err := jsonString(raw)
			if err != nil {
				return bad(name, err.Error())
			}
			if err := decodeCustomHeaders(s, attrs); err != nil {
				return bad(name, err.Error())
			}
		case "specversion", "id", "type", "source", "time", "subject", "aggregatetype":
			s, err := jsonString(raw)
			if err != nil {
				return bad(name, err.Error())
			}
			attrs["ce-"+name] = s
		case "schemaversion", "sequence":
			// Sent as strings, as binary mode writes them; a JSON integer,
			// which producers in other languages write naturally, is read
			// too. core checks that it is a non-negative integer.
			s, err := jsonString(raw)
			if err != nil {
				if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
					return bad(name, "is neither a string nor a number")
				}
				s = string(raw)
			}
			attrs["ce-"+name] = s
		case "traceparent", "tracestate", "baggage":
			s, err := jsonString(raw)
			if err != nil {
				return bad(name, err.Error())
			}
			attrs[name] = s
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return bad("body", "is not a complete JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("body", "has data after the JSON object")
	}
	if haveData && haveBase64 {
		return bad("data", "and data_base64 are both set: send one")
	}
	return core.EventFromCloudEventHeaders(attrs, data)
}

// decodeCustomHeaders reads the outboxheaders extension (a JSON object of
// strings) into attrs as binary mode's ce-x-<name> attributes.
func decodeCustomHeaders(s string, attrs map[string]string) error {
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("is not a JSON object of strings")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errors.New("is not a JSON object of strings")
		}
		name, _ := tok.(string)
		var v string
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("header %q is not a string", name)
		}
		if name == "" {
			return errors.New("has an empty header name")
		}
		k := core.HeaderCustomPrefix + name
		if _, dup := attrs[k]; dup {
			return fmt.Errorf("header %q appears twice", name)
		}
		attrs[k] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return errors.New("is not a JSON object of strings")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("has data after the JSON object")
	}
	return nil
}

// jsonString decodes raw as a JSON string.
func jsonString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", errors.New("is not a string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errors.New("is not a string")
	}
	return s, nil
}
