package tracing_test

import (
	"slices"
	"testing"

	"github.com/outboxkit/outboxkit/tracing"
)

func TestHeaderCarrier(t *testing.T) {
	t.Parallel()
	c := tracing.HeaderCarrier{"Traceparent": "canonical", "x-a": "1"}
	if got := c.Get("traceparent"); got != "canonical" {
		t.Errorf("Get ignoring case = %q, want %q", got, "canonical")
	}
	c.Set("traceparent", "exact")
	if got := c.Get("traceparent"); got != "exact" {
		t.Errorf("Get prefers the exact key: got %q, want %q", got, "exact")
	}
	if got := c.Get("missing"); got != "" {
		t.Errorf("Get(missing) = %q", got)
	}
	keys := c.Keys()
	slices.Sort(keys)
	if want := []string{"Traceparent", "traceparent", "x-a"}; !slices.Equal(keys, want) {
		t.Errorf("Keys = %v, want %v", keys, want)
	}
	if got := tracing.HeaderCarrier(nil).Get("traceparent"); got != "" {
		t.Errorf("nil carrier Get = %q", got)
	}
}
