package qstashdev_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

func wantForbidden(t *testing.T, what string, status int, header http.Header, body []byte) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if status != http.StatusForbidden || json.Unmarshal(body, &e) != nil || e.Error == "" || header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %d %s, want 403 with a JSON error", what, status, body)
	}
	if header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("%s: refused, yet Access-Control-Allow-Origin %q", what, header.Get("Access-Control-Allow-Origin"))
	}
}

// Any web page can POST to 127.0.0.1 as a "simple" cross-origin request
// (text/plain, no preflight), and the default token is public: without an
// origin check every page a developer visits could publish through their
// qstashdev to their local services. Browsers always send Origin on such a
// request; SDKs and curl send none.
func TestCrossOriginRequestRefused(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	forged := hdr("Authorization", "", "Origin", "https://evil.example", "Content-Type", "text/plain;charset=UTF-8")
	status, header, b := h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/hook")+"?qstash_token="+qstashdev.DefaultToken, forged, "from a web page")
	wantForbidden(t, "cross-origin text/plain publish", status, header, b)

	withToken := hdr("Origin", "http://localhost:3000")
	status, header, b = h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/hook"), withToken, "x")
	wantForbidden(t, "cross-origin publish with the bearer token", status, header, b)
	status, header, b = h.Do(http.MethodOptions, "/v2/publish/"+dst.URL("/hook"), hdr("Origin", "https://evil.example", "Access-Control-Request-Method", "POST"), "")
	wantForbidden(t, "foreign preflight", status, header, b)
	status, header, b = h.Do(http.MethodGet, "/v2/dlq", hdr("Origin", "null"), "")
	wantForbidden(t, "opaque origin", status, header, b)
	if n := len(h.Server.Messages()); n != 0 || dst.Count() != 0 {
		t.Fatalf("refused requests left %d messages and %d deliveries", n, dst.Count())
	}

	// The server's own origin, and no Origin at all, are fine.
	h.Publish(dst.URL("/same"), hdr("Origin", h.API.URL), "same origin")
	h.Publish(dst.URL("/none"), nil, "no origin")
	h.WaitIdle()
	if n := dst.Count(); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}
}

// Origins on the allow-list may call the API from a browser, with the
// CORS answers a page needs to send Authorization and read the result.
func TestAllowedOrigin(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{AllowedOrigins: []string{"http://localhost:3000"}})
	dst := qstashdevtest.NewSink(t, nil)
	status, header, b := h.Do(http.MethodOptions, "/v2/publish/"+dst.URL("/hook"), hdr(
		"Authorization", "",
		"Origin", "http://localhost:3000",
		"Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization,content-type,upstash-delay"), "")
	if status != http.StatusNoContent || header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		!strings.Contains(strings.ToLower(header.Get("Access-Control-Allow-Headers")), "upstash-delay") ||
		!strings.Contains(header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("preflight: %d %v %s", status, header, b)
	}
	status, header, b = h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/hook"), hdr("Origin", "http://localhost:3000"), "ok")
	if status != http.StatusOK || header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" || !strings.Contains(header.Get("Vary"), "Origin") {
		t.Fatalf("allowed origin: %d %v %s", status, header, b)
	}
	status, header, b = h.Do(http.MethodPost, "/v2/publish/"+dst.URL("/hook"), hdr("Origin", "http://localhost:3001"), "no")
	wantForbidden(t, "an origin not on the list", status, header, b)

	for _, bad := range [][]string{{"localhost:3000"}, {"http://localhost:3000/app"}, {"*"}, {""}} {
		if _, err := qstashdev.New(qstashdev.Config{AllowedOrigins: bad}); err == nil || !strings.Contains(err.Error(), "AllowedOrigins") {
			t.Errorf("AllowedOrigins %q: New = %v, want an error naming AllowedOrigins", bad, err)
		}
	}
}

// DNS rebinding: a page on evil.example whose name then resolves to
// 127.0.0.1 is same-origin with the server as the browser sees it, so it
// sends no foreign Origin (none at all on a GET) and may read the answers.
// Its requests name evil.example in Host, though: with the public token,
// only loopback names are answered.
func TestRebindingHostRefusedWithPublicToken(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	_, port, _ := strings.Cut(strings.TrimPrefix(h.API.URL, "http://"), ":")
	get := func(srv *qstashdevtest.Harness, host, origin string) (int, http.Header, []byte) {
		req, err := http.NewRequest(http.MethodGet, srv.API.URL+"/v2/dlq?qstash_token="+qstashdev.DefaultToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := srv.API.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, resp.Header, []byte(b.String())
	}
	status, header, b := get(h, "evil.example:"+port, "")
	wantForbidden(t, "rebound GET", status, header, b)
	status, header, b = get(h, "evil.example:"+port, "http://evil.example:"+port)
	wantForbidden(t, "rebound same-origin request", status, header, b)
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "app.localhost:" + port, "[::1]:" + port} {
		if status, _, b := get(h, host, ""); status != http.StatusOK {
			t.Errorf("Host %s: %d %s, want 200", host, status, b)
		}
	}

	// With a token of its own the server may be reached under any name:
	// a rebinding page cannot know the token.
	own := qstashdevtest.NewHarness(t, qstashdev.Config{Token: "own"})
	req, _ := http.NewRequest(http.MethodGet, own.API.URL+"/v2/dlq", nil)
	req.Host = "qstash.internal"
	req.Header.Set("Authorization", "Bearer own")
	resp, err := own.API.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Host qstash.internal with a token of its own: %d, want 200", resp.StatusCode)
	}
}
