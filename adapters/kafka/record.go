package outboxkafka

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outboxkit/core"
)

// kafkaPrefix is the attribute prefix of the CloudEvents Kafka protocol
// binding ("ce_"), which writes with an underscore what HTTP and
// Watermill metadata write "ce-".
const kafkaPrefix = "ce_"

// httpPrefix is core's attribute prefix (core.HeaderID and the others).
const httpPrefix = "ce-"

// DefaultKey is the default PublisherConfig.Key: the event's aggregate ID,
// so an aggregate's events share a partition, else its event ID.
func DefaultKey(e core.Event) []byte {
	if e.AggregateID != "" {
		return []byte(e.AggregateID)
	}
	return []byte(e.ID.String())
}

// DefaultTopic is the default PublisherConfig.Topic: e.Destination, else
// e.Type.
func DefaultTopic(e core.Event) string {
	if e.Destination != "" {
		return e.Destination
	}
	return e.Type
}

// RecordFromEvent returns the record that carries e to topic: key
// DefaultKey(e), value the payload, and the headers of the package
// documentation's table (core.CloudEventHeaders, "ce-" written "ce_").
// Header order is fixed (attributes, then trace context, then custom
// headers, each sorted), so two publishes of an event are byte-identical.
func RecordFromEvent(e core.Event, topic string) *kgo.Record {
	return recordFromEvent(e, topic, DefaultKey(e))
}

func recordFromEvent(e core.Event, topic string, key []byte) *kgo.Record {
	h := core.CloudEventHeaders(e)
	headers := make([]kgo.RecordHeader, 0, len(h))
	for k, v := range h {
		if rest, ok := strings.CutPrefix(k, httpPrefix); ok {
			k = kafkaPrefix + rest
		}
		headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	sortHeaders(headers)
	return &kgo.Record{
		Topic:   topic,
		Key:     key,
		Value:   append([]byte(nil), e.Payload...),
		Headers: headers,
	}
}

// sortHeaders orders headers by name: attributes (ce_) before the rest,
// and custom ones (ce_x-) last.
func sortHeaders(hs []kgo.RecordHeader) {
	rank := func(k string) int {
		switch {
		case strings.HasPrefix(k, kafkaPrefix+"x-"):
			return 2
		case strings.HasPrefix(k, kafkaPrefix) || k == core.HeaderContentType:
			return 0
		}
		return 1
	}
	// Insertion sort: a record has a dozen headers.
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0; j-- {
			a, b := hs[j-1], hs[j]
			ra, rb := rank(a.Key), rank(b.Key)
			if ra < rb || (ra == rb && a.Key <= b.Key) {
				break
			}
			hs[j-1], hs[j] = b, a
		}
	}
}

// EventFromRecord rebuilds the event a record carries, the inverse of
// RecordFromEvent: attributes from the ce_ headers (matched without
// regard to case), trace context and custom (ce_x-) headers back into
// Headers, the payload from the value, and Destination from the topic.
// Headers that are none of these (a producer's own, an interceptor's) are
// ignored. A consumer uses it to hand a record to a core.Deduper or a
// core.Handler, keyed by the event ID.
//
// It returns a *core.ValidationError (matching core.ErrInvalidEvent) when
// the record does not carry a valid event: no ce_id or ce_type, an ID
// that is not a UUID, an attribute given twice (ce_type and CE_TYPE).
func EventFromRecord(r *kgo.Record) (core.Event, error) {
	h := make(map[string]string, len(r.Headers))
	for _, rh := range r.Headers {
		k := rh.Key
		if len(k) > len(kafkaPrefix) && strings.EqualFold(k[:len(kafkaPrefix)], kafkaPrefix) {
			k = httpPrefix + k[len(kafkaPrefix):]
		} else if len(k) > len(httpPrefix) && strings.EqualFold(k[:len(httpPrefix)], httpPrefix) {
			// Only the Kafka spelling is read: an HTTP-style name beside
			// it must not decide an attribute.
			continue
		}
		if _, dup := h[k]; dup {
			return core.Event{}, &core.ValidationError{Field: rh.Key, Reason: "appears twice: send each header once"}
		}
		h[k] = string(rh.Value)
	}
	e, err := core.EventFromCloudEventHeaders(h, append([]byte(nil), r.Value...))
	if err != nil {
		return core.Event{}, err
	}
	if e.Destination == "" {
		e.Destination = r.Topic
	}
	return e, nil
}
