package qstashdev_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

func redactedValue(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "REDACTED:" + hex.EncodeToString(sum[:])
}

// Upstash-Redact-Fields hides the body and headers from the REST API
// (REDACTED:<sha256>), while the destination gets the real values.
func TestRedactFields(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := failingSink(t)
	id := h.Publish(dst.URL("/d"), hdr("Upstash-Delay", "1h", "Upstash-Redact-Fields", "body, header[Authorization]",
		"Upstash-Forward-Authorization", "Bearer secret", "Upstash-Forward-X-Public", "yes"), "card=4242")
	status, _, b := h.Do(http.MethodGet, "/v2/messages/"+id, nil, "")
	if status != http.StatusOK {
		t.Fatalf("get: %d %s", status, b)
	}
	var m struct {
		Body   string              `json:"body"`
		Header map[string][]string `json:"header"`
	}
	mustJSON(t, b, &m)
	if m.Body != redactedValue("card=4242") || m.Header["Authorization"][0] != redactedValue("Bearer secret") || m.Header["X-Public"][0] != "yes" {
		t.Fatalf("message shows %s", b)
	}
	if strings.Contains(string(b), "secret") || strings.Contains(string(b), "4242") {
		t.Fatalf("message leaks a redacted value: %s", b)
	}

	// All headers (the TypeScript SDK sends "header"); the failure keeps
	// its redaction in the DLQ, and the destination got the real values.
	h.Publish(dst.URL("/fail"), hdr("Upstash-Retries", "0", "Upstash-Redact-Fields", "header",
		"Upstash-Forward-Authorization", "Bearer secret"), "plain")
	h.WaitFor("a DLQ entry", func() bool { return len(h.Server.DLQ()) == 1 })
	_, _, b = h.Do(http.MethodGet, "/v2/dlq", nil, "")
	if strings.Contains(string(b), "secret") || !strings.Contains(string(b), redactedValue("Bearer secret")) || !strings.Contains(string(b), `"body":"plain"`) {
		t.Fatalf("DLQ shows %s", b)
	}
	got := dst.Deliveries()
	if len(got) != 1 || got[0].Header.Get("Authorization") != "Bearer secret" {
		t.Fatalf("destination got %+v, want the real header", got)
	}
	if status, _, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/x"), hdr("Upstash-Redact-Fields", "cookies"), ""); status != http.StatusBadRequest {
		t.Fatalf("unknown field: %d %s, want 400", status, b)
	}
}

// A server plays one region: its deliveries say so in Upstash-Region, and
// are signed with its own keys.
func TestRegionHeader(t *testing.T) {
	t.Parallel()
	const cur, next = "sig_usCurrentKeyForTheTests00", "sig_usNextKeyForTheTests00000"
	us := qstashdevtest.NewHarness(t, qstashdev.Config{Region: "us-east-1", CurrentSigningKey: cur, NextSigningKey: next})
	eu := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	us.Publish(dst.URL("/us"), nil, "x")
	eu.Publish(dst.URL("/eu"), nil, "x")
	us.WaitIdle()
	eu.WaitIdle()
	for _, d := range dst.Deliveries() {
		want, key := "EU-CENTRAL-1", qstashdev.DefaultCurrentSigningKey
		if d.Path == "/us" {
			want, key = "US-EAST-1", cur
		}
		if got := d.Header.Get("Upstash-Region"); got != want {
			t.Errorf("%s: Upstash-Region %q, want %q", d.Path, got, want)
		}
		if _, err := jwtParse(d.Header.Get("Upstash-Signature"), key); err != nil {
			t.Errorf("%s: not signed with the region's key: %v", d.Path, err)
		}
	}
	if _, err := qstashdev.New(qstashdev.Config{Region: "ap-south-1"}); err == nil {
		t.Fatal("New accepted an unknown region")
	}
}
