package qstash

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outboxkit/core"
)

func TestAppendJSONEscapedMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "plain", `quote " and backslash \`, "tab\tnewline\ncr\r", "\x00\x01\x1f\x7f",
		"é 😀 \u2028 \u2029", `{"nested":"json \"string\""}`, "</script>&<>",
	} {
		enc := append([]byte{'"'}, appendJSONEscaped(nil, s)...)
		enc = append(enc, '"')
		var got string
		if err := json.Unmarshal(enc, &got); err != nil || got != s {
			t.Errorf("appendJSONEscaped(%q) = %s: decodes to %q, %v", s, enc, got, err)
		}
	}
}

// FuzzAppendJSONEscaped checks the hand-written JSON string encoder against
// encoding/json's decoder for every valid UTF-8 input.
func FuzzAppendJSONEscaped(f *testing.F) {
	f.Add("a\"b\\c\n\x00é")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // callers never pass invalid UTF-8 (see batchable, checkHeader)
		}
		enc := append([]byte{'"'}, appendJSONEscaped(nil, s)...)
		enc = append(enc, '"')
		var got string
		if err := json.Unmarshal(enc, &got); err != nil || got != s {
			t.Fatalf("appendJSONEscaped(%q) = %s: decodes to %q, %v", s, enc, got, err)
		}
	})
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Second: "1s", 90 * time.Second: "1m30s", time.Hour: "1h",
		24*time.Hour + 10*time.Hour + 30*time.Minute: "1d10h30m", 48 * time.Hour: "2d",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestRetryAfterReadsResetValues(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	for _, tc := range []struct {
		name string
		h    map[string]string
		want time.Duration
	}{
		{"unix seconds", map[string]string{"RateLimit-Reset": "1900000030"}, 30 * time.Second},
		{"delta seconds", map[string]string{"RateLimit-Reset": "12"}, 12 * time.Second},
		{"unix milliseconds", map[string]string{"RateLimit-Reset": "1900000030000"}, 30 * time.Second},
		{"not the exhausted limit", map[string]string{"RateLimit-Remaining": "10", "RateLimit-Reset": "1900000030"}, 0},
		{"longest wins", map[string]string{"Burst-RateLimit-Reset": "1900000002", "Retry-After": "9"}, 9 * time.Second},
		{"in the past", map[string]string{"RateLimit-Reset": "1800000000"}, 0},
		{"capped at a day", map[string]string{"RateLimit-Reset": "1990000000"}, 24 * time.Hour},
		{"HTTP date", map[string]string{"Retry-After": now.Add(40 * time.Second).UTC().Format(http.TimeFormat)}, 40 * time.Second},
		{"garbage", map[string]string{"Retry-After": "soon", "RateLimit-Reset": "x"}, 0},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("%s: retryAfter = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func benchEvents(n int) []core.Event {
	out := make([]core.Event, n)
	for i := range out {
		e, _ := core.NewEvent("order.confirmed", map[string]any{"order": "o-" + strconv.Itoa(i), "total": 42, "currency": "EUR"})
		e.Source = "shop"
		e.AggregateType = "order"
		e.AggregateID = "o-" + strconv.Itoa(i)
		e.Sequence = int64(i + 1)
		e.CreatedAt = time.Now()
		e.Headers = map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tenant":      "acme",
		}
		out[i] = e
	}
	return out
}

// BenchmarkEncodeBatch measures the encoding of one /v2/batch body of 100
// events with flow control on, into a reused buffer as the publisher does,
// in the default structured mode (each body a CloudEvents JSON document).
func BenchmarkEncodeBatch(b *testing.B) { benchmarkEncodeBatch(b, StructuredMode) }

// BenchmarkEncodeBatchBinaryMode is BenchmarkEncodeBatch with the payload as
// the body and the attributes as forwarded headers.
func BenchmarkEncodeBatchBinaryMode(b *testing.B) { benchmarkEncodeBatch(b, BinaryMode) }

func benchmarkEncodeBatch(b *testing.B, mode ContentMode) {
	p, err := NewPublisher(&PublisherConfig{
		Token: "t", Destination: Target{URL: "https://consumer.example.com/events"},
		FlowControl: &FlowControl{Parallelism: 1}, ContentMode: mode,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	evs := benchEvents(100)
	t := p.cfg.Destination
	now := time.Now()
	buf := make([]byte, 0, 64<<10)
	var scratch []byte
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		buf = append(buf[:0], '[')
		for i := range evs {
			if i > 0 {
				buf = append(buf, ',')
			}
			if buf, err = p.appendBatchElement(buf, &scratch, &evs[i], t, now); err != nil {
				b.Fatal(err)
			}
		}
		buf = append(buf, ']')
	}
	b.SetBytes(int64(len(buf)))
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEncodeBatchEncodingJSON is the baseline the hand-written encoder
// replaces: json.Marshal of a slice of structs with a header map each.
func BenchmarkEncodeBatchEncodingJSON(b *testing.B) {
	type element struct {
		Destination string            `json:"destination"`
		Headers     map[string]string `json:"headers"`
		Body        string            `json:"body"`
	}
	evs := benchEvents(100)
	b.ReportAllocs()
	for b.Loop() {
		els := make([]element, len(evs))
		for i, e := range evs {
			h := map[string]string{"Content-Type": "application/json", "Upstash-Deduplication-Id": e.ID.String()}
			for k, v := range core.CloudEventHeaders(e) {
				h["Upstash-Forward-"+k] = v
			}
			h["Upstash-Flow-Control-Key"] = e.AggregateKey()
			h["Upstash-Flow-Control-Value"] = "parallelism=1"
			els[i] = element{"https://consumer.example.com/events", h, string(e.Payload)}
		}
		if _, err := json.Marshal(els); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}

func TestBatchElementIsDeterministic(t *testing.T) {
	for _, mode := range []ContentMode{StructuredMode, BinaryMode} {
		p, err := NewPublisher(&PublisherConfig{Token: "t", Destination: Target{URL: "https://consumer.example.com/events"}, ContentMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		e := benchEvents(1)[0]
		e.Headers["b-custom"], e.Headers["a-custom"], e.Headers["baggage"] = "2", "1", "k=v"
		now := time.Now()
		var scratch []byte
		first, err := p.appendBatchElement(nil, &scratch, &e, p.cfg.Destination, now)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 { // map iteration order changes between runs
			again, err := p.appendBatchElement(nil, &scratch, &e, p.cfg.Destination, now)
			if err != nil || string(again) != string(first) {
				t.Fatalf("%v mode: encodings differ:\n%s\n%s", mode, first, again)
			}
		}
	}
}

func TestCheckHeaderValue(t *testing.T) {
	for v, ok := range map[string]bool{
		"plain": true, "tab\there": true, "é": true, "line\nbreak": false, "nul\x00": false, "del\x7f": false, "bad \xff utf8": false,
	} {
		if err := checkHeaderValue("x", v); (err == nil) != ok {
			t.Errorf("checkHeaderValue(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}
