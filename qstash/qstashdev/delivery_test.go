package qstashdev_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// parseSignature checks the JWT's HMAC with key and returns its claims.
func parseSignature(t *testing.T, sig, key string) jwt.MapClaims {
	t.Helper()
	claims := jwt.MapClaims{}
	tok, err := jwt.ParseWithClaims(sig, claims, func(tok *jwt.Token) (any, error) {
		return []byte(key), nil
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithIssuer("Upstash"))
	if err != nil {
		t.Fatalf("signature %q does not verify with %s: %v", sig, key, err)
	}
	if tok.Header["typ"] != "JWT" {
		t.Errorf("JWT header %v", tok.Header)
	}
	return claims
}

func TestSignatureClaims(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	url := dst.URL("/path/x?q=1&r=2")
	body := "some body, any bytes \x00\xff"
	h.Publish(url, nil, body)
	h.WaitIdle()
	d := dst.Deliveries()[0]
	claims := parseSignature(t, d.Header.Get("Upstash-Signature"), qstashdev.DefaultCurrentSigningKey)

	sum := sha256.Sum256([]byte(body))
	wantBody := base64.URLEncoding.EncodeToString(sum[:]) // with '=' padding
	if !strings.HasSuffix(wantBody, "=") {
		t.Fatalf("test assumption: a SHA-256 in base64 is padded")
	}
	if claims["body"] != wantBody {
		t.Errorf("body claim %v, want %s", claims["body"], wantBody)
	}
	if claims["sub"] != url {
		t.Errorf("sub %v, want %s", claims["sub"], url)
	}
	iat, _ := claims["iat"].(float64)
	exp, _ := claims["exp"].(float64)
	nbf, _ := claims["nbf"].(float64)
	if exp-iat != 300 || nbf != iat || time.Since(time.Unix(int64(iat), 0)) > time.Minute {
		t.Errorf("iat %v exp %v nbf %v", iat, exp, nbf)
	}
	if jti, _ := claims["jti"].(string); jti == "" {
		t.Error("jti missing")
	}
	// The key is the whole string: without the sig_ prefix it must fail.
	if _, err := jwt.Parse(d.Header.Get("Upstash-Signature"), func(*jwt.Token) (any, error) {
		return []byte(strings.TrimPrefix(qstashdev.DefaultCurrentSigningKey, "sig_")), nil
	}); err == nil {
		t.Error("signature verifies with the key minus its sig_ prefix")
	}
	if string(d.Body) != body {
		t.Errorf("body changed in transit: %q", d.Body)
	}
}

func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	id := h.Publish(dst.URL("/h"), hdr(
		"Upstash-Forward-X-Tenant", "acme",
		"upstash-forward-ce-id", "ev-1", // any case
		"Upstash-Forward-Authorization", "Bearer downstream",
		"Content-Type", "application/cloudevents+json",
		"X-Not-Forwarded", "1",
		"Upstash-Retries", "0",
		"Upstash-Label", "lbl",
		"Upstash-Method", "PUT",
	), "b")
	h.WaitIdle()
	d := dst.Deliveries()[0]
	want := map[string]string{
		"X-Tenant":           "acme",
		"Ce-Id":              "ev-1",
		"Authorization":      "Bearer downstream",
		"Content-Type":       "application/cloudevents+json",
		"User-Agent":         "Upstash-QStash",
		"Upstash-Message-Id": id,
		"Upstash-Retried":    "0",
		"Upstash-Caller-Ip":  "127.0.0.1",
	}
	for k, v := range want {
		if got := d.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"X-Not-Forwarded", "Upstash-Retries", "Upstash-Label", "Upstash-Forward-X-Tenant", "Upstash-Method", "Upstash-Topic-Name"} {
		if v := d.Header.Get(k); v != "" {
			t.Errorf("%s delivered (%q); only forwarded headers go through", k, v)
		}
	}
	if d.Method != http.MethodPut {
		t.Errorf("method %s, want PUT from Upstash-Method", d.Method)
	}
}

func TestPublishPathRouting(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, nil)
	// A destination whose own path has "//" and a query string, sent raw
	// as the SDKs do, and a fully escaped one; qstash_token is ours, not
	// the destination's.
	raw := dst.URL("/a//b/?x=1&y=%2F")
	escaped := strings.NewReplacer(":", "%3A", "/", "%2F").Replace(dst.URL("/escaped"))
	status, _, b := h.Do(http.MethodPost, "/v2/publish/"+raw+"&qstash_token="+qstashdev.DefaultToken, hdr("Authorization", ""), "1")
	if status != http.StatusOK {
		t.Fatalf("raw destination with token in query: %d %s", status, b)
	}
	h.Publish(escaped, nil, "2")
	h.WaitIdle()
	paths := map[string]bool{}
	for _, d := range dst.Deliveries() {
		paths[d.Path] = true
	}
	if !paths["/a//b/?x=1&y=%2F"] || !paths["/escaped"] {
		t.Fatalf("delivered paths %v", paths)
	}
}

func TestRetriesWithScaledBackoff(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{BackoffScale: 0.001})
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n < 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	id := h.Publish(dst.URL("/r"), hdr("Upstash-Retries", "2"), "r")
	h.WaitIdle()
	var retried []string
	for _, d := range dst.Deliveries() {
		retried = append(retried, d.Header.Get("Upstash-Retried"))
		if d.Header.Get("Upstash-Message-Id") != id {
			t.Errorf("retry changed the message id")
		}
	}
	if strings.Join(retried, ",") != "0,1,2" {
		t.Fatalf("Upstash-Retried %v, want 0,1,2", retried)
	}
	if got := strings.Join(h.States(id), ","); got != "CREATED,ACTIVE,ERROR,RETRY,ACTIVE,ERROR,RETRY,ACTIVE,DELIVERED" {
		t.Fatalf("states %s", got)
	}
	// Retry n waits e^(2.5n) s scaled by 1/1000: 12.18ms, then 148.41ms.
	var delays []time.Duration
	for _, e := range h.Server.MessageEvents(id) {
		if e.State == qstashdev.StateRetry {
			delays = append(delays, e.NextDeliveryTime.Sub(e.Time))
		}
	}
	want := []time.Duration{qstashdev.QStashBackoff(1) / 1000, qstashdev.QStashBackoff(2) / 1000}
	for i := range want {
		if i >= len(delays) || (delays[i]-want[i]).Abs() > time.Microsecond {
			t.Fatalf("retry delays %v, want %v", delays, want)
		}
	}
	if len(h.Server.DLQ()) != 0 {
		t.Fatal("a delivered message reached the DLQ")
	}
}

func TestQStashBackoff(t *testing.T) {
	t.Parallel()
	// QStash's documented schedule: 12s, 2m28s, 30m8s, 6h7m, then a day.
	want := []time.Duration{12 * time.Second, 2*time.Minute + 28*time.Second, 30*time.Minute + 8*time.Second,
		6*time.Hour + 7*time.Minute + 6*time.Second, 24 * time.Hour, 24 * time.Hour}
	for i, w := range want {
		if got := qstashdev.QStashBackoff(i + 1).Truncate(time.Second); got != w {
			t.Errorf("QStashBackoff(%d) = %v, want %v", i+1, got, w)
		}
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, value string
		want        time.Duration // 0: ignored, default backoff applies
	}{
		{"seconds", "7", 7 * time.Second},
		{"go duration", "1m30s", 90 * time.Second},
		{"http date", "", 45 * time.Second}, // filled in below from the clock
		{"over a day is ignored", "90000", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := qstashdevtest.NewFakeClock()
			h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
			value := tc.value
			if value == "" {
				value = clock.Now().Add(tc.want).UTC().Format(http.TimeFormat)
			}
			dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					w.Header().Set("Retry-After", value)
					w.WriteHeader(http.StatusTooManyRequests)
				}
			})
			id := h.Publish(dst.URL("/ra"), nil, "x")
			var retry qstashdev.Event
			h.WaitFor("RETRY event", func() bool {
				for _, e := range h.Server.MessageEvents(id) {
					if e.State == qstashdev.StateRetry {
						retry = e
						return true
					}
				}
				return false
			})
			want := tc.want
			if want == 0 {
				want = qstashdev.QStashBackoff(1)
			}
			if got := retry.NextDeliveryTime.Sub(retry.Time); got != want {
				t.Fatalf("retry due after %v, want %v", got, want)
			}
			clock.WaitTimer(t, retry.NextDeliveryTime)
			if dst.Count() != 1 {
				t.Fatalf("retried before its time")
			}
			clock.Advance(want)
			h.WaitIdle()
			if n := dst.Count(); n != 2 {
				t.Fatalf("deliveries %d, want 2", n)
			}
		})
	}
}

func TestRetryDelayExpression(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock, BackoffScale: 1})
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(500) })
	id := h.Publish(dst.URL("/x"), hdr("Upstash-Retries", "2", "Upstash-Retry-Delay", "1000 * pow(2, retried) + max(0, 5 - 10)"), "x")
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		var next time.Time
		h.WaitFor("retry "+strconv.Itoa(i+1), func() bool {
			m, ok := h.Server.Message(id)
			if ok && m.State == qstashdev.StateRetry && m.Retried == i+1 && !m.NextDeliveryTime.IsZero() {
				next = m.NextDeliveryTime
				return true
			}
			return false
		})
		if got := next.Sub(clock.Now()); got != want {
			t.Fatalf("retry %d due in %v, want %v", i+1, got, want)
		}
		clock.WaitTimer(t, next)
		clock.Advance(want)
	}
	h.WaitIdle()
	if n := dst.Count(); n != 3 {
		t.Fatalf("attempts %d, want 3", n)
	}
	if dlq := h.Server.DLQ(); len(dlq) != 1 || dlq[0].Message.ID != id || dlq[0].Message.Retried != 2 {
		t.Fatalf("DLQ %+v", dlq)
	}
}

func TestNonRetryable489(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{BackoffScale: 0.001})
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/final" {
			w.Header().Set("Upstash-NonRetryable-Error", "true")
		}
		w.WriteHeader(489)
		w.Write([]byte("invalid event"))
	})
	final := h.Publish(dst.URL("/final"), hdr("Upstash-Retries", "5"), "x")
	// 489 without the header is an ordinary failure and is retried.
	plain := h.Publish(dst.URL("/plain"), hdr("Upstash-Retries", "1"), "y")
	h.WaitIdle()
	per := map[string]int{}
	for _, d := range dst.Deliveries() {
		per[d.Path]++
	}
	if per["/final"] != 1 || per["/plain"] != 2 {
		t.Fatalf("attempts per path %v, want /final 1 and /plain 2", per)
	}
	if got := strings.Join(h.States(final), ","); got != "CREATED,ACTIVE,ERROR,FAILED" {
		t.Fatalf("states %s", got)
	}
	dlq := h.Server.DLQ()
	if len(dlq) != 2 {
		t.Fatalf("DLQ has %d entries, want 2", len(dlq))
	}
	var e qstashdev.DLQEntry
	for _, x := range dlq {
		if x.Message.ID == final {
			e = x
		}
	}
	if e.ResponseStatus != 489 || string(e.ResponseBody) != "invalid event" || e.ResponseHeader.Get("Upstash-Nonretryable-Error") != "true" {
		t.Fatalf("DLQ entry %+v", e)
	}
	_ = plain
}

func TestDLQRetry(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	first := h.Publish(dst.URL("/d"), hdr("Upstash-Retries", "0", "Upstash-Forward-X-K", "v"), "payload")
	h.WaitIdle()
	dlq := h.Server.DLQ()
	if len(dlq) != 1 || dlq[0].ResponseStatus != http.StatusBadGateway {
		t.Fatalf("DLQ %+v", dlq)
	}
	status, _, b := h.Do(http.MethodPost, "/v2/dlq/retry/"+dlq[0].DLQID, nil, "")
	if status != http.StatusCreated {
		t.Fatalf("retry: %d %s", status, b)
	}
	var res struct {
		MessageID string `json:"messageId"`
	}
	mustJSON(t, b, &res)
	if res.MessageID == "" || res.MessageID == first {
		t.Fatalf("retry answered messageId %q (first was %q)", res.MessageID, first)
	}
	h.WaitIdle()
	got := dst.Deliveries()
	if len(got) != 2 || string(got[1].Body) != "payload" || got[1].Header.Get("X-K") != "v" || got[1].Header.Get("Upstash-Message-Id") != res.MessageID {
		t.Fatalf("redelivery %+v", got)
	}
	if len(h.Server.DLQ()) != 0 {
		t.Fatal("retried entry still in the DLQ")
	}
	if status, _, _ := h.Do(http.MethodPost, "/v2/dlq/retry/"+dlq[0].DLQID, nil, ""); status != http.StatusNotFound {
		t.Fatalf("second retry of the same entry: %d, want 404", status)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/target", http.StatusFound)
		}
	})
	h.Publish(dst.URL("/moved"), hdr("Upstash-Retries", "0"), "x")
	h.WaitIdle()
	for _, d := range dst.Deliveries() {
		if d.Path == "/target" {
			t.Fatal("redirect was followed")
		}
	}
	if dlq := h.Server.DLQ(); len(dlq) != 1 || dlq[0].ResponseStatus != http.StatusFound {
		t.Fatalf("a 302 must fail the attempt: DLQ %+v", dlq)
	}
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{})
	release := make(chan struct{})
	defer close(release)
	dst := qstashdevtest.NewSink(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	id := h.Publish(dst.URL("/slow"), hdr("Upstash-Timeout", "50ms", "Upstash-Retries", "0"), "x")
	h.WaitIdle()
	dlq := h.Server.DLQ()
	if len(dlq) != 1 || dlq[0].Message.ID != id || dlq[0].ResponseStatus != 0 || !strings.Contains(dlq[0].Error, "timeout") {
		t.Fatalf("DLQ %+v", dlq)
	}
}
