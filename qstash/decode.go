package qstash

import (
	"net/http"
	"strings"

	"github.com/outboxkit/outboxkit/core"
)

// DecodeEvent rebuilds the event a QStash delivery carries from its headers
// and raw body. QStash forwards the CloudEvents binary-mode headers the
// publisher sent as Upstash-Forward-<name> under their own names (ce-id,
// ce-type, traceparent, ...), so h is the delivery request's header as it
// arrives. It returns a *core.ValidationError (matching core.ErrInvalidEvent)
// when an attribute is missing or malformed.
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
