package tracing

import (
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts an event's Headers to propagation.TextMapCarrier, so
// any OpenTelemetry propagator (W3C trace context, baggage, B3, Jaeger) reads
// and writes trace context there.
//
// Set needs a non-nil map. Get falls back to a case-insensitive match because
// transports disagree on case: HTTP canonicalises header names, CloudEvents
// lower-cases them, and a header written as "traceparent" may come back as
// "Traceparent".
type HeaderCarrier map[string]string

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the value for key, matched exactly first and then ignoring case.
func (c HeaderCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

// Set stores value under key.
func (c HeaderCarrier) Set(key, value string) { c[key] = value }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
