package qstashdev_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The API token may travel as ?qstash_token=, and a publish path's query
// string is the destination's own. Whatever spelling of the parameter
// authenticates a request must be taken out of the destination URL, or the
// token reaches the consumer, its access logs, the signature's sub claim,
// events and the DLQ.
func TestQueryTokenNeverForwarded(t *testing.T) {
	t.Parallel()
	const tok = "s3cret+/="
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Token: tok})
	dst := qstashdevtest.NewSink(t, nil)
	esc := url.QueryEscape(tok)
	noAuth := hdr("Authorization", "")
	for _, q := range []string{
		"qstash_token=" + esc,
		"qstash%5Ftoken=" + esc,     // escaped underscore
		"qstash%5ftoken=" + esc,     // lower-case hex
		"%71stash_to%6Ben=" + esc,   // any escaped letter
		"a=1&qstash%5Ftoken=" + esc, // after the destination's own parameters
		"qstash%5Ftoken=" + esc + "&qstash_token=" + esc + "&b=2",
	} {
		id := h.Publish(dst.URL("/hook")+"?"+q, noAuth, "x")
		h.WaitIdle()
		got := dst.Deliveries()
		d := got[len(got)-1]
		if d.Header.Get("Upstash-Message-Id") != id {
			t.Fatalf("%s: last delivery is not %s", q, id)
		}
		if strings.Contains(strings.ToLower(d.Path), "token") || strings.Contains(d.Path, esc) {
			t.Errorf("?%s: destination got %q: the token was forwarded", q, d.Path)
		}
		claims := parseSignature(t, d.Header.Get("Upstash-Signature"), qstashdev.DefaultCurrentSigningKey)
		if sub, _ := claims["sub"].(string); strings.Contains(sub, esc) {
			t.Errorf("?%s: signature sub %q carries the token", q, sub)
		}
	}
	// The destination's other parameters survive, as sent.
	h.Publish(dst.URL("/keep")+"?a=1&qstash%5Ftoken="+esc+"&b=%2F", noAuth, "y")
	h.WaitIdle()
	got := dst.Deliveries()
	if p := got[len(got)-1].Path; p != "/keep?a=1&b=%2F" {
		t.Errorf("destination got %q, want /keep?a=1&b=%%2F", p)
	}
	for _, e := range h.Server.Events() {
		if strings.Contains(e.URL, esc) {
			t.Fatalf("event %s records url %q with the token", e.State, e.URL)
		}
	}

	// A token in the header and a (wrong or right) one in the query: the
	// query one is still not forwarded.
	h.Publish(dst.URL("/both")+"?qstash%5Ftoken=other", hdr("Authorization", "Bearer "+tok), "z")
	h.WaitIdle()
	got = dst.Deliveries()
	if p := got[len(got)-1].Path; p != "/both" {
		t.Errorf("destination got %q, want /both", p)
	}

	// Spellings that Go's query parser does not read as qstash_token do not
	// authenticate.
	for _, q := range []string{
		"QSTASH_TOKEN=" + esc,
		"qstash_token%3D" + esc,
		"a=1;qstash_token=" + esc,
		"qstash_token=" + esc + "%zz",
	} {
		status, _, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/no")+"?"+q, noAuth, "n")
		if status != http.StatusUnauthorized {
			t.Errorf("?%s: %d %s, want 401", q, status, b)
		}
	}
}
