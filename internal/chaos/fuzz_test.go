package chaos_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// FuzzEventFromCloudEventHeaders checks core's decoder on its own (qstash's
// FuzzDecodeHeaders reaches it through http.Header, which joins repeated
// names first; Watermill metadata and hand-built maps do not): it never
// panics, refuses only with errors matching core.ErrInvalidEvent, accepts
// only valid events, decodes the same input the same way every time, and
// whatever it accepts survives a trip through CloudEventHeaders unchanged.
// Seeds: testdata/fuzz/FuzzEventFromCloudEventHeaders.
func FuzzEventFromCloudEventHeaders(f *testing.F) {
	f.Add("ce-specversion: 1.0\nce-id: 0190b6c2-7a6f-7cc4-9b5f-3c3f1f0e8a11\nce-type: order.placed\nce-source: shop\nce-subject: 42\nce-aggregatetype: order\nce-sequence: 7\nce-schemaversion: 2\nce-time: 2026-01-02T03:04:05.123456789Z\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\nce-x-tenant: t1",
		[]byte(`{"order":42}`))
	f.Add("CE-SPECVERSION: 1.0\nCe-Id: 0190B6C2-7A6F-7CC4-9B5F-3C3F1F0E8A11\nCE-TYPE: x", []byte(`null`))
	f.Add("ce-specversion: 1.0\nce-id: 00000000-0000-0000-0000-000000000000\nce-type: x", []byte(`{}`))
	f.Add("ce-specversion: 1.0\nce-id: 0190b6c2-7a6f-7cc4-9b5f-3c3f1f0e8a11\nce-type: x\nce-x-: v\nce-x-ce-x-a: b", []byte(`[]`))
	f.Fuzz(func(t *testing.T, block string, body []byte) {
		h := map[string]string{}
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, ":")
			h[k] = strings.TrimLeft(v, " ")
		}
		e, err := core.EventFromCloudEventHeaders(h, body)
		// Map iteration order is random: a second decoding must agree.
		e2, err2 := core.EventFromCloudEventHeaders(h, body)
		if (err == nil) != (err2 == nil) || (err == nil && !sameEvent(e, e2)) {
			t.Fatalf("decoding the same headers twice disagrees:\n%+v, %v\n%+v, %v", e, err, e2, err2)
		}
		if err != nil {
			if !errors.Is(err, core.ErrInvalidEvent) {
				t.Fatalf("error %v does not match core.ErrInvalidEvent", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded an invalid event: %v", err)
		}
		back, err := core.EventFromCloudEventHeaders(core.CloudEventHeaders(e), body)
		if err != nil {
			t.Fatalf("a decoded event does not decode again after encoding: %v", err)
		}
		if !sameEvent(e, back) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, back)
		}
	})
}

// FuzzCloudEventRoundTrip starts from the other end: any event that passes
// Validate must reach a consumer as itself, so CloudEventHeaders followed by
// EventFromCloudEventHeaders must give it back (up to the documented
// normalisations: the default source reads as none, trace-context header
// names travel lower-cased, and a creation time outside the years 0000 to
// 9999 travels as unknown).
// Seeds: testdata/fuzz/FuzzCloudEventRoundTrip.
func FuzzCloudEventRoundTrip(f *testing.F) {
	id := core.MustParseID("0190b6c2-7a6f-7cc4-9b5f-3c3f1f0e8a11")
	f.Add(id[:], "order.placed", "shop", "order", "42", int64(7), 1, []byte(`{"a":1}`), "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-tenant", "t1", int64(1767225600), int64(5))
	f.Add(id[:], "t", "", "", "", int64(0), 0, []byte(`0`), "Baggage", "k=v", "ce-x-nested", "v", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, rawID []byte, typ, source, aggType, aggID string, seq int64, version int,
		payload []byte, hk1, hv1, hk2, hv2 string, sec, nsec int64) {
		var e core.Event
		copy(e.ID[:], rawID)
		e.Type, e.Source, e.AggregateType, e.AggregateID = typ, source, aggType, aggID
		e.Sequence, e.SchemaVersion, e.Payload = seq, version, payload
		e.Headers = map[string]string{hk1: hv1, hk2: hv2}
		if sec != 0 || nsec != 0 {
			e.CreatedAt = time.Unix(sec, nsec%1e9).UTC()
		}
		if e.Validate() != nil {
			return
		}
		got, err := core.EventFromCloudEventHeaders(core.CloudEventHeaders(e), payload)
		if err != nil {
			t.Fatalf("a valid event cannot be decoded from its own headers: %v\n%+v", err, e)
		}
		want := e
		if want.Source == core.DefaultSource {
			want.Source = ""
		}
		if y := want.CreatedAt.Year(); y < 0 || y > 9999 {
			want.CreatedAt = time.Time{} // RFC 3339 cannot write it: sent as unknown
		}
		want.Headers = make(map[string]string, 2)
		for k, v := range e.Headers {
			if isTrace(k) {
				k = strings.ToLower(k)
			}
			want.Headers[k] = v
		}
		if !sameEvent(want, got) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", want, got)
		}
	})
}

func isTrace(k string) bool {
	for _, t := range []string{"traceparent", "tracestate", "baggage"} {
		if strings.EqualFold(k, t) {
			return true
		}
	}
	return false
}

func sameEvent(a, b core.Event) bool {
	if a.ID != b.ID || a.Type != b.Type || a.Source != b.Source || a.AggregateType != b.AggregateType ||
		a.AggregateID != b.AggregateID || a.Sequence != b.Sequence || a.SchemaVersion != b.SchemaVersion ||
		!a.CreatedAt.Equal(b.CreatedAt) || !bytes.Equal(a.Payload, b.Payload) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for k, v := range a.Headers {
		if bv, ok := b.Headers[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
