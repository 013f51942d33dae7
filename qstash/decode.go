package qstash

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/outboxkit/outboxkit/core"
)

// decodeDelivery reads the event of a verified delivery. A structured-mode
// delivery (Content-Type application/cloudevents+json) is read from its
// signed body alone; a binary-mode one only when allowBinary is set, and
// never when its body is itself a structured-mode event: Content-Type is
// not signed, so relabelling a captured structured delivery as binary must
// not let its headers speak for it. The status is 400 or 415.
func decodeDelivery(h http.Header, body []byte, allowBinary bool) (core.Event, int, error) {
	cts := h.Values("Content-Type")
	if len(cts) > 1 {
		return core.Event{}, http.StatusBadRequest, fmt.Errorf("qstash: %d Content-Type headers", len(cts))
	}
	var mediaType string
	if len(cts) == 1 {
		mediaType, _, _ = mime.ParseMediaType(cts[0])
	}
	if mediaType == ContentTypeStructured {
		e, err := DecodeStructuredEvent(body)
		if err != nil {
			return core.Event{}, http.StatusBadRequest, err
		}
		return e, 0, nil
	}
	if !allowBinary {
		return core.Event{}, http.StatusUnsupportedMediaType, fmt.Errorf("qstash: Content-Type %q is not %s: a binary-mode delivery's event attributes travel in headers QStash does not sign; publish with the default ContentMode (structured), or set ReceiverConfig.AllowBinaryMode", truncate(strings.Join(cts, ",")), ContentTypeStructured)
	}
	if bytes.Contains(body, []byte(`"specversion"`)) {
		if _, err := DecodeStructuredEvent(body); err == nil {
			return core.Event{}, http.StatusBadRequest, fmt.Errorf("qstash: a structured-mode event delivered as Content-Type %q: refused, since its headers are not signed", truncate(strings.Join(cts, ",")))
		}
	}
	e, err := DecodeEvent(h, body)
	if err != nil {
		return core.Event{}, http.StatusBadRequest, err
	}
	return e, 0, nil
}

// DecodeEvent rebuilds the event a CloudEvents binary-mode QStash delivery
// carries from its headers and raw body. QStash forwards the binary-mode
// headers the publisher sent as Upstash-Forward-<name> under their own
// names (ce-id, ce-type, traceparent, ...), so h is the delivery request's
// header as it arrives. QStash signs the body, not these headers: only a
// caller that accepts unauthenticated attributes should use it (the
// Receiver does so only with AllowBinaryMode). It returns a
// *core.ValidationError (matching core.ErrInvalidEvent) when an attribute
// is missing or malformed.
//
// Names are lower-cased before decoding: net/http canonicalizes them
// (Ce-X-Tenant), while events carry custom header names in the lower case
// HTTP delivers them in. Repeated headers are joined with ",", as HTTP
// defines for list-valued fields such as tracestate and baggage; a repeated
// single-valued attribute such as ce-id then fails to parse, as it should.
func DecodeEvent(h http.Header, body []byte) (core.Event, error) {
	m := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		lk := strings.ToLower(k)
		v := vs[0]
		if len(vs) > 1 {
			v = strings.Join(vs, ",")
		}
		if prev, dup := m[lk]; dup {
			// Two spellings of one name in a hand-built header map.
			v = prev + "," + v
		}
		m[lk] = v
	}
	return core.EventFromCloudEventHeaders(m, body)
}
