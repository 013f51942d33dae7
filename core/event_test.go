package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

func TestNewIDIsVersion7AndTimeOrdered(t *testing.T) {
	a := core.NewIDAt(time.UnixMilli(1_000))
	b := core.NewIDAt(time.UnixMilli(2_000))
	if a.String() >= b.String() {
		t.Fatalf("IDs not time-ordered: %s then %s", a, b)
	}
	if a[6]>>4 != 7 || a[8]>>6 != 2 {
		t.Fatalf("%s is not an RFC 9562 version 7 UUID", a)
	}
	if got := b.Time(); !got.Equal(time.UnixMilli(2_000)) {
		t.Fatalf("Time() = %s", got)
	}
	parsed, err := core.ParseID(strings.ToUpper(a.String()))
	if err != nil || parsed != a {
		t.Fatalf("ParseID round trip: %v, %v", parsed, err)
	}
	for _, bad := range []string{"", "not-a-uuid", "0192b1c4-7e3a-7c3b-8d1e-5c3f2a1b0c9", "0192b1c4x7e3a-7c3b-8d1e-5c3f2a1b0c9d", "0192b1c4-7e3a-7c3b-8d1e-5c3f2a1b0c9g"} {
		if _, err := core.ParseID(bad); !errors.Is(err, core.ErrInvalidID) {
			t.Errorf("ParseID(%q) err = %v, want ErrInvalidID", bad, err)
		}
	}
}

func TestEventValidation(t *testing.T) {
	valid := func() core.Event {
		e, err := core.NewEvent("order.placed", map[string]any{"id": 1})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	cases := map[string]func(*core.Event){
		"nil id":           func(e *core.Event) { e.ID = core.ID{} },
		"empty type":       func(e *core.Event) { e.Type = " " },
		"long type":        func(e *core.Event) { e.Type = strings.Repeat("t", 256) },
		"newline in type":  func(e *core.Event) { e.Type = "a\nb" },
		"empty payload":    func(e *core.Event) { e.Payload = nil },
		"non-JSON payload": func(e *core.Event) { e.Payload = []byte("{oops") },
		"bad header name":  func(e *core.Event) { e.Headers = map[string]string{"a b": "x"} },
		"bad header value": func(e *core.Event) { e.Headers = map[string]string{"x": "a\r\nInjected: 1"} },
		"negative version": func(e *core.Event) { e.SchemaVersion = -1 },
	}
	for name, mutate := range cases {
		e := valid()
		mutate(&e)
		err := e.Validate()
		var ve *core.ValidationError
		if !errors.Is(err, core.ErrInvalidEvent) || !errors.As(err, &ve) {
			t.Errorf("%s: Validate() = %v, want a *ValidationError", name, err)
		}
	}
	e := valid()
	e.Payload = json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)
	if err := e.ValidatePayloadSize(50); !errors.Is(err, core.ErrPayloadTooLarge) || !errors.Is(err, core.ErrInvalidEvent) {
		t.Fatalf("ValidatePayloadSize = %v", err)
	}
	if err := e.ValidatePayloadSize(0); err != nil {
		t.Fatalf("limit 0 means none: %v", err)
	}
	if _, err := core.NewEvent("x", func() {}); !errors.Is(err, core.ErrInvalidEvent) {
		t.Fatalf("NewEvent with unencodable payload: %v", err)
	}
}

func TestCloudEventHeadersRoundTrip(t *testing.T) {
	e, _ := core.NewEvent("order.placed", map[string]int{"id": 7})
	e.Source, e.AggregateType, e.AggregateID, e.Sequence, e.SchemaVersion = "shop", "order", "o-7", 3, 2
	e.CreatedAt = time.Date(2031, 1, 2, 3, 4, 5, 6000, time.UTC)
	e.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"}
	h := core.CloudEventHeaders(e)
	if h["ce-id"] != e.ID.String() || h["ce-specversion"] != "1.0" || h["ce-subject"] != "o-7" || h["ce-x-tenant"] != "acme" {
		t.Fatalf("headers: %v", h)
	}
	// Transports may change header case and add their own headers.
	wire := map[string]string{"Upstash-Message-Id": "msg_1", "User-Agent": "x"}
	for k, v := range h {
		wire[strings.ToUpper(k[:1])+k[1:]] = v
	}
	got, err := core.EventFromCloudEventHeaders(wire, e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Type != e.Type || got.Source != e.Source || got.AggregateType != e.AggregateType ||
		got.AggregateID != e.AggregateID || got.Sequence != 3 || got.SchemaVersion != 2 || !got.CreatedAt.Equal(e.CreatedAt) ||
		got.Headers["traceparent"] != e.Headers["traceparent"] || got.Headers["tenant"] != "acme" || len(got.Headers) != 2 {
		t.Fatalf("round trip: got %+v, want %+v", got, e)
	}
}

func TestEventFromMalformedHeaders(t *testing.T) {
	e, _ := core.NewEvent("t", map[string]int{})
	base := core.CloudEventHeaders(e)
	for name, mutate := range map[string]func(map[string]string){
		"missing id":         func(h map[string]string) { delete(h, "ce-id") },
		"bad id":             func(h map[string]string) { h["ce-id"] = "42" },
		"missing type":       func(h map[string]string) { delete(h, "ce-type") },
		"wrong specversion":  func(h map[string]string) { h["ce-specversion"] = "0.3" },
		"bad time":           func(h map[string]string) { h["ce-time"] = "yesterday" },
		"bad sequence":       func(h map[string]string) { h["ce-sequence"] = "-4" },
		"bad schema version": func(h map[string]string) { h["ce-schemaversion"] = "v2" },
	} {
		h := make(map[string]string)
		for k, v := range base {
			h[k] = v
		}
		mutate(h)
		if _, err := core.EventFromCloudEventHeaders(h, e.Payload); !errors.Is(err, core.ErrInvalidEvent) {
			t.Errorf("%s: err = %v, want ErrInvalidEvent", name, err)
		}
	}
	if _, err := core.EventFromCloudEventHeaders(base, []byte("not json")); !errors.Is(err, core.ErrInvalidEvent) {
		t.Errorf("non-JSON body accepted: %v", err)
	}
}

func TestRecoverTurnsPanicIntoError(t *testing.T) {
	h := core.ChainHandler(core.HandlerFunc(func(context.Context, core.Event) error { panic("boom") }), core.Recover())
	var pe *core.PanicError
	if err := h.Handle(context.Background(), core.Event{}); !errors.As(err, &pe) || core.IsPermanent(err) {
		t.Fatalf("err = %v, want a transient *PanicError", err)
	}
}

func TestRetryPolicy(t *testing.T) {
	p := core.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: 5 * time.Second, DisableJitter: true}.WithDefaults()
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := p.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	id := core.NewID()
	if o := p.Decide(id, 1, errors.New("x")); o.Kind != core.Retry || o.Delay != time.Second {
		t.Errorf("first failure: %+v", o)
	}
	if o := p.Decide(id, 5, errors.New("x")); o.Kind != core.DeadLettered {
		t.Errorf("failure at MaxAttempts: %+v", o)
	}
	if o := p.Decide(id, 1, core.Permanent(errors.New("x"))); o.Kind != core.DeadLettered {
		t.Errorf("permanent failure: %+v", o)
	}
	if o := p.Decide(id, 1, core.RetryAfter(errors.New("429"), time.Minute)); o.Kind != core.Retry || o.Delay != time.Minute {
		t.Errorf("RetryAfter hint ignored: %+v", o)
	}
	j := core.RetryPolicy{InitialBackoff: 10 * time.Second, Jitter: 0.2}.WithDefaults()
	for i := 0; i < 100; i++ {
		if d := j.Backoff(1); d < 8*time.Second || d > 12*time.Second {
			t.Fatalf("jittered backoff %s outside ±20%% of 10s", d)
		}
	}
}

func TestBatchErrorExpandsPerEvent(t *testing.T) {
	be := core.NewBatchError(3)
	if be.ErrOrNil() != nil {
		t.Fatal("empty BatchError is not nil")
	}
	boom := errors.New("boom")
	be.Set(1, boom)
	errs := core.EventErrors(3, be.ErrOrNil())
	if errs[0] != nil || !errors.Is(errs[1], boom) || errs[2] != nil {
		t.Fatalf("EventErrors = %v", errs)
	}
	all := core.EventErrors(2, boom)
	if !errors.Is(all[0], boom) || !errors.Is(all[1], boom) {
		t.Fatalf("plain error not applied to every event: %v", all)
	}
}

// TestEventValidationRefusesControlsAndInvalidUTF8: attributes travel as
// HTTP header values (CloudEvents binary mode), header keys as header names,
// and payloads as JSON text, which must be UTF-8 (RFC 8259 §8.1) even though
// json.Valid does not check it.
func TestEventValidationRefusesControlsAndInvalidUTF8(t *testing.T) {
	valid := func() core.Event {
		e, err := core.NewEvent("order.placed", map[string]any{"id": 1})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	refused := map[string]func(*core.Event){
		"SOH in type":                      func(e *core.Event) { e.Type = "order\x01placed" },
		"ESC in type":                      func(e *core.Event) { e.Type = "order.\x1b[31mplaced" },
		"DEL in source":                    func(e *core.Event) { e.Source = "shop\x7f" },
		"NUL in aggregate type":            func(e *core.Event) { e.AggregateType = "or\x00der" },
		"vertical tab in aggregate ID":     func(e *core.Event) { e.AggregateID = "o-1\x0b" },
		"unit separator in destination":    func(e *core.Event) { e.Destination = "https://example.com/\x1f" },
		"form feed in header name":         func(e *core.Event) { e.Headers = map[string]string{"te\x0cnant": "acme"} },
		"tab in header name":               func(e *core.Event) { e.Headers = map[string]string{"te\tnant": "acme"} },
		"DEL in header name":               func(e *core.Event) { e.Headers = map[string]string{"tenant\x7f": "acme"} },
		"DEL in header value":              func(e *core.Event) { e.Headers = map[string]string{"tenant": "acme\x7f"} },
		"backspace in header value":        func(e *core.Event) { e.Headers = map[string]string{"tenant": "ac\bme"} },
		"invalid UTF-8 in a JSON string":   func(e *core.Event) { e.Payload = []byte("{\"name\":\"caf\xe9\"}") },
		"truncated UTF-8 in a JSON string": func(e *core.Event) { e.Payload = []byte("\"\xc3\"") },
		"encoded surrogate in a JSON key":  func(e *core.Event) { e.Payload = []byte("{\"\xed\xa0\x80\":1}") },
	}
	for name, mutate := range refused {
		e := valid()
		mutate(&e)
		var ve *core.ValidationError
		if err := e.Validate(); !errors.As(err, &ve) || !errors.Is(err, core.ErrInvalidEvent) {
			t.Errorf("%s: Validate() = %v, want a *ValidationError", name, err)
		}
	}
	accepted := map[string]func(*core.Event){
		"tab in type":         func(e *core.Event) { e.Type = "order\tplaced" },
		"tab in header value": func(e *core.Event) { e.Headers = map[string]string{"note": "a\tb"} },
		"UTF-8 everywhere": func(e *core.Event) {
			e.Source, e.AggregateID, e.Headers = "café", "Ωmega-7", map[string]string{"città": "Zürich"}
		},
		"UTF-8 in the payload":        func(e *core.Event) { e.Payload = []byte(`{"name":"café","emoji":"🎉"}`) },
		"escaped controls in payload": func(e *core.Event) { e.Payload = []byte(`{"s":"a\u0001\t\n"}`) },
	}
	for name, mutate := range accepted {
		e := valid()
		mutate(&e)
		if err := e.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", name, err)
		}
	}
}
