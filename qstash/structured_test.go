package qstash_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// sameEvent reports how b differs from a in what travels, or "".
func sameEvent(a, b core.Event) string {
	switch {
	case a.ID != b.ID:
		return "ID"
	case a.Type != b.Type:
		return "Type"
	case a.Source != b.Source:
		return "Source"
	case a.AggregateType != b.AggregateType || a.AggregateID != b.AggregateID:
		return "aggregate"
	case a.Sequence != b.Sequence:
		return "Sequence"
	case a.SchemaVersion != b.SchemaVersion:
		return "SchemaVersion"
	case !a.CreatedAt.Equal(b.CreatedAt):
		return "CreatedAt"
	case !bytes.Equal(a.Payload, b.Payload):
		return "Payload"
	case len(a.Headers) != len(b.Headers):
		return "Headers"
	}
	for k, v := range a.Headers {
		if b.Headers[k] != v {
			return "header " + k
		}
	}
	return ""
}

// TestStructuredEventRoundTrip: every attribute, the trace context and
// custom headers (whatever their names) survive the structured-mode
// document, which is a CloudEvents JSON event with the payload as data.
func TestStructuredEventRoundTrip(t *testing.T) {
	t.Parallel()
	full := testEvent(t)
	full.CreatedAt = time.Date(2030, 1, 2, 3, 4, 5, 678900000, time.UTC)
	full.Headers["X-Request-ID"] = "r-1"
	full.Headers["quote\"name"] = "value with \"quotes\" and \\ and ünïcode"
	full.Headers["baggage"] = "k=v"
	minimal := core.Event{ID: core.NewID(), Type: "ping", Payload: []byte(`null`)}
	zero := testEvent(t)
	zero.SchemaVersion, zero.Sequence, zero.Headers, zero.Source = 0, 0, nil, ""
	for name, e := range map[string]core.Event{"full": full, "minimal": minimal, "zero versions": zero} {
		b, err := qstash.EncodeStructuredEvent(e)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", name, err, b)
		}
		if doc["specversion"] != "1.0" || doc["id"] != e.ID.String() || doc["type"] != e.Type || doc["datacontenttype"] != "application/json" || doc["data"] == nil && string(e.Payload) != "null" {
			t.Errorf("%s: not a CloudEvents JSON event: %s", name, b)
		}
		got, err := qstash.DecodeStructuredEvent(b)
		if err != nil {
			t.Fatalf("%s: decode: %v\n%s", name, err, b)
		}
		if diff := sameEvent(e, got); diff != "" {
			t.Errorf("%s: %s changed in the round trip:\n%+v\n%+v", name, diff, e, got)
		}
	}
}

// TestStructuredEventCarriesNonJSONPayloads: a payload that is not JSON (a
// row written by plain SQL) travels as data_base64, byte for byte.
func TestStructuredEventCarriesNonJSONPayloads(t *testing.T) {
	t.Parallel()
	e := testEvent(t)
	e.Payload = []byte("not json \xff\xfe")
	b, err := qstash.EncodeStructuredEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"data_base64":"`) || strings.Contains(string(b), `"data":`) {
		t.Fatalf("non-JSON payload not sent as data_base64: %s", b)
	}
	// core refuses such a payload on decoding, as binary mode does: what
	// matters here is that the bytes are not altered on the way.
	_, err = qstash.DecodeStructuredEvent(b)
	if !errors.Is(err, core.ErrInvalidEvent) || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("decode = %v, want the payload refused for what it is", err)
	}
}

// TestDecodeStructuredEventReadsForeignProducers: what other CloudEvents
// producers write is read too: integers for the numeric extensions, null
// attributes as absent, unknown extensions ignored, members in any order.
func TestDecodeStructuredEventReadsForeignProducers(t *testing.T) {
	t.Parallel()
	id := core.NewID()
	doc := `{"data":{"n":1},"sequence":12,"schemaversion":2,"subject":null,"comexampleext":"x","id":"` + id.String() +
		`","type":"order.paid","source":"/billing","specversion":"1.0","time":"2030-01-02T03:04:05Z","datacontenttype":"application/json"}`
	e, err := qstash.DecodeStructuredEvent([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != id || e.Type != "order.paid" || e.Source != "/billing" || e.Sequence != 12 || e.SchemaVersion != 2 ||
		e.AggregateID != "" || string(e.Payload) != `{"n":1}` || len(e.Headers) != 0 {
		t.Fatalf("decoded %+v", e)
	}
}

// TestDecodeStructuredEventRefusesAmbiguousDocuments: a document that could
// mean two things to two parsers (a repeated member, trailing data), or
// whose members have the wrong types, is refused.
func TestDecodeStructuredEventRefusesAmbiguousDocuments(t *testing.T) {
	t.Parallel()
	good := string(deliveryBody(t, testEvent(t)))
	for name, doc := range map[string]string{
		"repeated id":                 strings.Replace(good, "{", `{"id":"`+core.NewID().String()+`",`, 1),
		"repeated type":               strings.Replace(good, "{", `{"type":"order.refunded",`, 1),
		"id in another case":          strings.Replace(good, `"id":`, `"ID":`, 1),
		"trailing data":               good + `{}`,
		"two objects":                 good + good,
		"array":                       "[" + good + "]",
		"not JSON":                    good[:len(good)-2],
		"invalid UTF-8":               strings.Replace(good, "shop", "sh\xffp", 1),
		"type is a number":            strings.Replace(good, `"type":"order.confirmed"`, `"type":7`, 1),
		"sequence is fractional":      strings.Replace(good, `"sequence":"7"`, `"sequence":7.5`, 1),
		"sequence is negative":        strings.Replace(good, `"sequence":"7"`, `"sequence":-7`, 1),
		"sequence is an object":       strings.Replace(good, `"sequence":"7"`, `"sequence":{}`, 1),
		"data and data_base64":        strings.Replace(good, "{", `{"data_base64":"e30=",`, 1),
		"headers not a string":        strings.Replace(good, `"outboxheaders":"{\"tenant\":\"acme\"}"`, `"outboxheaders":{"tenant":"acme"}`, 1),
		"headers repeat a name":       strings.Replace(good, `{\"tenant\":\"acme\"}`, `{\"tenant\":\"acme\",\"tenant\":\"evil\"}`, 1),
		"header clashes with tracing": strings.Replace(good, `{\"tenant\":\"acme\"}`, `{\"traceparent\":\"x\"}`, 1),
		"empty header name":           strings.Replace(good, `{\"tenant\":\"acme\"}`, `{\"\":\"x\"}`, 1),
		"no specversion":              strings.Replace(good, `"specversion":"1.0",`, "", 1),
		"no data":                     good[:strings.Index(good, `,"data":`)] + "}",
	} {
		if doc == good {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if e, err := qstash.DecodeStructuredEvent([]byte(doc)); err == nil {
			t.Errorf("%s: decoded %+v, want an error\n%s", name, e, doc)
		} else if !errors.Is(err, core.ErrInvalidEvent) {
			t.Errorf("%s: error %v does not match core.ErrInvalidEvent", name, err)
		}
	}
}

// FuzzDecodeStructuredEvent checks that decoding a structured-mode body never
// panics, that what decodes is a valid event, and that it survives another
// encoding unchanged.
func FuzzDecodeStructuredEvent(f *testing.F) {
	e, _ := core.NewEvent("order.confirmed", map[string]any{"order": "o-1"})
	e.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}
	e.AggregateType, e.AggregateID, e.Sequence = "order", "o-1", 3
	seed, _ := qstash.EncodeStructuredEvent(e)
	f.Add(seed)
	f.Add([]byte(`{"specversion":"1.0","id":"0190b6c2-7a6f-7cc4-9b5f-3c3f1f0e8a11","type":"t","data":1,"sequence":2}`))
	f.Add([]byte(`{"specversion":"1.0","id":"0190b6c2-7a6f-7cc4-9b5f-3c3f1f0e8a11","type":"t","data_base64":"e30="}`))
	f.Add([]byte(`{"id":1,"id":2}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := qstash.DecodeStructuredEvent(body)
		if err != nil {
			if !errors.Is(err, core.ErrInvalidEvent) {
				t.Fatalf("error %v does not match core.ErrInvalidEvent", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded an invalid event: %v", err)
		}
		again, err := qstash.EncodeStructuredEvent(e)
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v", err)
		}
		e2, err := qstash.DecodeStructuredEvent(again)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v\n%s", err, again)
		}
		if diff := sameEvent(e, e2); diff != "" {
			t.Fatalf("round trip changed %s:\n%+v\n%+v", diff, e, e2)
		}
	})
}
