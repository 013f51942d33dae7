package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CloudEvents 1.0 binary-mode attribute names, as transports carry them (HTTP
// headers, message metadata). Extensions are lower-case letters only, as the
// CloudEvents spec requires.
const (
	HeaderID            = "ce-id"
	HeaderType          = "ce-type"
	HeaderSource        = "ce-source"
	HeaderSpecVersion   = "ce-specversion"
	HeaderTime          = "ce-time"
	HeaderSubject       = "ce-subject"
	HeaderSchemaVersion = "ce-schemaversion"
	HeaderAggregateType = "ce-aggregatetype"
	HeaderSequence      = "ce-sequence"
	HeaderContentType   = "content-type"

	// HeaderCustomPrefix prefixes an event's custom headers (other than the
	// trace context) on the wire, so a receiver can tell them from the
	// transport's own headers. HTTP lower-cases header names, so custom header
	// names should be lower-case to survive every transport unchanged.
	HeaderCustomPrefix = "ce-x-"

	// SpecVersion is the CloudEvents version outboxkit speaks.
	SpecVersion = "1.0"
	// DefaultSource is sent as ce-source for events without a Source, since
	// CloudEvents requires one.
	DefaultSource = "outboxkit"
)

// Trace context headers travel under their own W3C names, so tracing works
// with transports and consumers that know nothing of outboxkit.
var traceHeaders = [...]string{"traceparent", "tracestate", "baggage"}

// CloudEventHeaders returns e's attributes and headers as CloudEvents
// binary-mode headers. The payload travels as the message body. ce-time is
// omitted when CreatedAt is zero or outside the years 0000 to 9999 that
// RFC 3339 can write.
func CloudEventHeaders(e Event) map[string]string {
	h := make(map[string]string, 10+len(e.Headers))
	h[HeaderSpecVersion] = SpecVersion
	h[HeaderID] = e.ID.String()
	h[HeaderType] = e.Type
	src := e.Source
	if src == "" {
		src = DefaultSource
	}
	h[HeaderSource] = src
	h[HeaderContentType] = "application/json"
	// RFC 3339 writes four-digit years only: a time outside them (a
	// plain-SQL row's created_at, say) would make the whole message
	// undecodable, so it is left out, as an unknown time is.
	if y := e.CreatedAt.UTC().Year(); !e.CreatedAt.IsZero() && y >= 0 && y <= 9999 {
		h[HeaderTime] = e.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	if e.AggregateID != "" {
		h[HeaderSubject] = e.AggregateID
	}
	if e.AggregateType != "" {
		h[HeaderAggregateType] = e.AggregateType
	}
	// Always sent, 0 included, so every version survives the trip (a missing
	// header decodes as 1, the default of events written by plain SQL).
	h[HeaderSchemaVersion] = strconv.Itoa(e.SchemaVersion)
	if e.Sequence != 0 {
		h[HeaderSequence] = strconv.FormatInt(e.Sequence, 10)
	}
	for k, v := range e.Headers {
		if isTraceHeader(k) {
			h[strings.ToLower(k)] = v
			continue
		}
		h[HeaderCustomPrefix+k] = v
	}
	return h
}

func isTraceHeader(k string) bool {
	for _, t := range traceHeaders {
		if strings.EqualFold(k, t) {
			return true
		}
	}
	return false
}

// EventFromCloudEventHeaders rebuilds an event from binary-mode headers and a
// body. Header names are matched case-insensitively; headers that are neither
// CloudEvents attributes, trace context nor custom (HeaderCustomPrefix) are
// ignored, so transport headers do not leak into the event. It returns a
// *ValidationError when a required attribute is missing or malformed.
func EventFromCloudEventHeaders(headers map[string]string, body []byte) (Event, error) {
	get := make(map[string]string, len(headers))
	var custom map[string]string
	bad := func(field, reason string) (Event, error) {
		return Event{}, &ValidationError{Field: field, Reason: reason}
	}
	// Two spellings of one name (ce-type and CE-TYPE, or traceparent and
	// ce-x-traceparent) would otherwise be decided by map iteration order:
	// the same message could decode differently on each delivery.
	const twice = "appears twice under different spellings: send each attribute once"
	for k, v := range headers {
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, HeaderCustomPrefix) && len(k) > len(HeaderCustomPrefix):
			if custom == nil {
				custom = make(map[string]string)
			}
			name := k[len(HeaderCustomPrefix):]
			if _, dup := custom[name]; dup {
				return bad(k, twice)
			}
			custom[name] = v
		case isTraceHeader(lk):
			if custom == nil {
				custom = make(map[string]string)
			}
			if _, dup := custom[lk]; dup {
				return bad(lk, twice)
			}
			custom[lk] = v
		default:
			if _, dup := get[lk]; dup {
				return bad(lk, twice)
			}
			get[lk] = v
		}
	}
	if v := get[HeaderSpecVersion]; v != SpecVersion {
		return bad(HeaderSpecVersion, fmt.Sprintf("is %q; want %q", v, SpecVersion))
	}
	rawID, ok := get[HeaderID]
	if !ok {
		return bad(HeaderID, "is missing")
	}
	id, err := ParseID(rawID)
	if err != nil {
		return Event{}, &ValidationError{Field: HeaderID, Reason: err.Error(), Err: ErrInvalidID}
	}
	e := Event{
		ID:            id,
		Type:          get[HeaderType],
		Source:        get[HeaderSource],
		AggregateType: get[HeaderAggregateType],
		AggregateID:   get[HeaderSubject],
		Payload:       body,
		Headers:       custom,
		SchemaVersion: 1,
	}
	if e.Source == DefaultSource {
		e.Source = ""
	}
	if t, ok := get[HeaderTime]; ok {
		if e.CreatedAt, err = time.Parse(time.RFC3339Nano, t); err != nil {
			return bad(HeaderTime, fmt.Sprintf("%q is not an RFC 3339 time", t))
		}
	}
	if v, ok := get[HeaderSchemaVersion]; ok {
		if e.SchemaVersion, err = strconv.Atoi(v); err != nil || e.SchemaVersion < 0 {
			return bad(HeaderSchemaVersion, fmt.Sprintf("%q is not a non-negative integer", v))
		}
	}
	if v, ok := get[HeaderSequence]; ok {
		if e.Sequence, err = strconv.ParseInt(v, 10, 64); err != nil || e.Sequence < 0 {
			return bad(HeaderSequence, fmt.Sprintf("%q is not a non-negative integer", v))
		}
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}
