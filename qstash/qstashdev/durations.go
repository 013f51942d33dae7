package qstashdev

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/internal/duration"
)

// parseQStashDuration parses Upstash-Delay and Upstash-Timeout values: Go
// durations extended with a "d" (24h) unit, such as "10s" or "1d10h30m", or a
// bare integer meaning seconds. internal/duration is the one parser of that
// grammar; it refuses negative values and values too long to represent.
func parseQStashDuration(s string) (time.Duration, error) {
	return duration.ParseOrSeconds(s)
}

// maxRetryAfter is the longest retry hint honoured; QStash ignores longer
// ones and falls back to its own backoff.
const maxRetryAfter = 24 * time.Hour

// retryAfterHint reads the destination's back-off hint from a failed
// response: Retry-After first, then X-RateLimit-Reset and its variants. The
// value may be seconds, an HTTP date, or a Go duration; an X-RateLimit-Reset
// that looks like a unix timestamp is taken as one. It reports false when
// there is no usable hint, including hints over one day.
func retryAfterHint(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := h.Get("Retry-After"); v != "" {
		return parseRetryValue(v, now, false)
	}
	for _, k := range []string{"X-Ratelimit-Reset", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"} {
		if v := h.Get(k); v != "" {
			return parseRetryValue(v, now, true)
		}
	}
	return 0, false
}

func parseRetryValue(v string, now time.Time, unixAllowed bool) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		switch {
		case unixAllowed && f > 1e9: // a unix timestamp, not a delay
			d = time.Unix(int64(f), 0).Sub(now)
		case f > maxRetryAfter.Seconds():
			return 0, false
		default:
			d = time.Duration(f * float64(time.Second))
		}
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else if pd, err := time.ParseDuration(v); err == nil {
		d = pd
	} else {
		return 0, false
	}
	if d > maxRetryAfter {
		return 0, false
	}
	if d < 0 {
		d = 0
	}
	return d, true
}

// parseFlowControlValue parses "parallelism=<n>, rate=<n>, period=<dur>".
// Period defaults to one second; a bare number is seconds.
func parseFlowControlValue(s string) (parallelism, rate int, period time.Duration, err error) {
	period = time.Second
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return 0, 0, 0, fmt.Errorf("Upstash-Flow-Control-Value %q: expected key=value pairs such as parallelism=2, rate=10, period=1s", s)
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch k {
		case "parallelism", "rate":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return 0, 0, 0, fmt.Errorf("Upstash-Flow-Control-Value: %s must be a positive integer, got %q", k, v)
			}
			if k == "rate" {
				rate = n
			} else {
				parallelism = n
			}
		case "period":
			d, err := parseQStashDuration(v)
			if err != nil || d <= 0 {
				return 0, 0, 0, fmt.Errorf("Upstash-Flow-Control-Value: period must be a positive duration such as 1s or 1m, got %q", v)
			}
			period = d
		default:
			return 0, 0, 0, fmt.Errorf("Upstash-Flow-Control-Value: unknown key %q (known: parallelism, rate, period)", k)
		}
	}
	return parallelism, rate, period, nil
}
