package qstash_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// TestParseTargetRefusesNamesQStashRejects: URL group and queue names are
// restricted to letters, digits, '-', '_' and '.' (Upstash's "Create URL
// Groups and Endpoints" page). Anything else — a script URL, a path, a
// dot-segment that would climb out of the API path — is refused before a
// request is made, naming the allowed characters.
func TestParseTargetRefusesNamesQStashRejects(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"shipping", "orders-v2", "billing_eu", "team.orders", "A1", strings.Repeat("g", 255)} {
		tg, err := qstash.ParseTarget(good)
		if err != nil || tg.URLGroup != good || tg.URL != "" {
			t.Errorf("ParseTarget(%q) = %+v, %v; want the URL group %q", good, tg, err, good)
		}
	}
	for _, url := range []string{"https://api.example.com/events", "HTTP://api.example.com/in?x=1"} {
		if tg, err := qstash.ParseTarget(url); err != nil || tg.URL != url {
			t.Errorf("ParseTarget(%q) = %+v, %v; want the URL", url, tg, err)
		}
	}
	for _, bad := range []string{
		"javascript:alert(1)",
		"data:text/html,<b>x</b>",
		"mailto:ops@example.com",
		"ftp://files.example.com/x",
		"shipping/../../v2/keys",
		"..",
		".",
		"group name",
		"grüppe",
		"a+b",
		"a@b",
		"a,b",
		"a;b",
		"a:b",
		"a=b",
		"a~b",
		"<script>",
		"tab\tgroup",
		strings.Repeat("g", 256),
		"",
	} {
		tg, err := qstash.ParseTarget(bad)
		if err == nil {
			t.Errorf("ParseTarget(%q) = %+v, want an error", bad, tg)
			continue
		}
		if bad != "" && !strings.Contains(bad, "://") && len(bad) <= 255 && !strings.Contains(err.Error(), "letters, digits, '-', '_' and '.'") {
			t.Errorf("ParseTarget(%q): error %q does not say which characters are allowed", bad, err)
		}
	}
}

// TestTargetNamesAreCheckedAtConstruction: the same rule applies to the
// configured targets (Destination, Routes) and to queues, so a typo fails
// NewPublisher instead of every publish.
func TestTargetNamesAreCheckedAtConstruction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field string
		cfg   qstash.PublisherConfig
	}{
		{"Destination", qstash.PublisherConfig{Destination: qstash.Target{URLGroup: "javascript:alert(1)"}}},
		{"Destination", qstash.PublisherConfig{Destination: qstash.Target{URL: endpointURL, Queue: "orders:fifo"}}},
		{"Destination", qstash.PublisherConfig{Destination: qstash.Target{URL: endpointURL, Queue: ".."}}},
		{`Routes["order.shipped"]`, qstash.PublisherConfig{Routes: map[string]qstash.Target{"order.shipped": {URLGroup: "ship ping"}}}},
	} {
		cfg := tc.cfg
		cfg.Token = testToken
		_, err := qstash.NewPublisher(&cfg)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: err = %v, want a ConfigError on %s", tc.cfg, err, tc.field)
		}
	}
}
