package qstashdev

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDelayExpr(t *testing.T) {
	t.Parallel()
	cases := []struct {
		src     string
		retried int
		want    float64
	}{
		{"1000", 0, 1000},
		{"retried", 4, 4},
		{"1000 * pow(2, retried)", 3, 8000},
		{"pow(2, retried) * 1000 + 500", 1, 2500},
		{"-retried + 10", 2, 8},
		{"--5", 0, 5},
		{"(1 + 2) * (3 + 4) / 7", 0, 3},
		{"sqrt(16) + abs(-2) + floor(1.7) + ceil(1.2) + round(2.5)", 0, 4 + 2 + 1 + 2 + 3},
		{"min(5, retried, 9) + max(1, 2, 3)", 7, 8},
		{"exp(0)", 0, 1},
		{"10 - 2 - 3", 0, 5},
		{"100 / 10 / 5", 0, 2},
		{"1 - 1000", 0, 0}, // negative delays clamp to 0
		{"0/0", 0, 0},      // NaN clamps to 0
		{" 1.5 ", 0, 1.5},
	}
	for _, tc := range cases {
		e, err := parseDelayExpr(tc.src)
		if err != nil {
			t.Errorf("parse %q: %v", tc.src, err)
			continue
		}
		if got := e.millis(tc.retried); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%q with retried=%d = %v, want %v", tc.src, tc.retried, got, tc.want)
		}
	}
	for _, bad := range []string{
		"", "1 +", "(1", "1)", "pow(2)", "sqrt(1, 2)", "min()", "retry", "foo(1)", "pow", "1 $ 2",
		"1.2.3", "1.5e0", // no exponent notation
		"os.exit(1)", strings.Repeat("(", 40) + "1" + strings.Repeat(")", 40), strings.Repeat("1+", 300) + "1",
	} {
		if _, err := parseDelayExpr(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
}

func TestParseQStashDuration(t *testing.T) {
	t.Parallel()
	good := map[string]time.Duration{
		"10s": 10 * time.Second, "1d10h30m": 34*time.Hour + 30*time.Minute, "2d": 48 * time.Hour,
		"90": 90 * time.Second, "1m30s": 90 * time.Second, "50ms": 50 * time.Millisecond,
	}
	for in, want := range good {
		if got, err := parseQStashDuration(in); err != nil || got != want {
			t.Errorf("parseQStashDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "-5s", "ten", "1x", "d", "1d-1h"} {
		if got, err := parseQStashDuration(bad); err == nil {
			t.Errorf("parseQStashDuration(%q) = %v, want an error", bad, got)
		}
	}
}

func TestRetryAfterHint(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	cases := []struct {
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second, true},
		{http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, true},
		{http.Header{"Retry-After": {"250ms"}}, 250 * time.Millisecond, true},
		{http.Header{"Retry-After": {now.Add(time.Minute).UTC().Format(http.TimeFormat)}}, time.Minute, true},
		{http.Header{"Retry-After": {now.Add(-time.Minute).UTC().Format(http.TimeFormat)}}, 0, true},
		{http.Header{"Retry-After": {"86401"}}, 0, false},
		{http.Header{"Retry-After": {"25h"}}, 0, false},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{"X-Ratelimit-Reset": {"1700000030"}}, 30 * time.Second, true},
		{http.Header{"X-Ratelimit-Reset": {"12"}}, 12 * time.Second, true},
		{http.Header{"X-Ratelimit-Reset-Requests": {"6m0s"}}, 6 * time.Minute, true},
		{http.Header{}, 0, false},
	}
	for _, tc := range cases {
		got, ok := retryAfterHint(tc.header, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfterHint(%v) = %v, %v; want %v, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseFlowControlValue(t *testing.T) {
	t.Parallel()
	p, r, per, err := parseFlowControlValue("parallelism=3, rate=10, period=1m")
	if err != nil || p != 3 || r != 10 || per != time.Minute {
		t.Fatalf("got %d %d %v %v", p, r, per, err)
	}
	if _, r, per, err := parseFlowControlValue("rate=5"); err != nil || r != 5 || per != time.Second {
		t.Fatalf("default period: %d %v %v", r, per, err)
	}
	for _, bad := range []string{"parallelism=0", "rate=x", "period=0s", "speed=1", "parallelism"} {
		if _, _, _, err := parseFlowControlValue(bad); err == nil {
			t.Errorf("parseFlowControlValue(%q): no error", bad)
		}
	}
}

func TestDestinationFrom(t *testing.T) {
	t.Parallel()
	cases := []struct{ path, query, want string }{
		{"https://x.io/a", "", "https://x.io/a"},
		{"https://x.io/a", "b=1&c=2", "https://x.io/a?b=1&c=2"},
		{"https://x.io/a", "b=1&qstash_token=t&c=2", "https://x.io/a?b=1&c=2"},
		{"https://x.io/a", "qstash%5Ftoken=t", "https://x.io/a"},
		{"https://x.io/a", "qstash%5Ftoken=t&b=%2F", "https://x.io/a?b=%2F"},
		{"https://x.io/a", "b=1;qstash_token=t;c=2", "https://x.io/a?b=1;c=2"},
		{"https://x.io/a", "b=1;c=2&&d", "https://x.io/a?b=1;c=2&&d"},
		{"https://x.io/a", "qstash_token", "https://x.io/a"},
		{"https://x.io/a", "b=%zz&qstash_tokens=1", "https://x.io/a?b=%zz&qstash_tokens=1"},
		{"https:/x.io/a", "", "https://x.io/a"},
		{"https%3A%2F%2Fx.io%2Fa", "", "https://x.io/a"},
		{"my-group", "", "my-group"},
	}
	for _, tc := range cases {
		if got := destinationFrom(tc.path, tc.query); got != tc.want {
			t.Errorf("destinationFrom(%q, %q) = %q, want %q", tc.path, tc.query, got, tc.want)
		}
	}
}
