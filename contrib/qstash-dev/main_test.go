package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	qstash "github.com/upstash/qstash-go"
	"go.uber.org/goleak"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun starts the command on a free port, reads the credentials it
// prints, uses them, and stops it as SIGINT would.
func TestRun(t *testing.T) {
	type delivery struct{ sig, body string }
	got := make(chan delivery, 10)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Get("Upstash-Signature"), string(b)}
	}))
	defer dest.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--backoff-scale", "0.001"}, outW, io.Discard)
		outW.Close()
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	env := map[string]string{}
	deadline := time.After(10 * time.Second)
	for env["QSTASH_NEXT_SIGNING_KEY"] == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended early; run returned %v", <-done)
			}
			if k, v, ok := strings.Cut(l, "="); ok {
				env[k] = v
			}
		case <-deadline:
			t.Fatal("credentials not printed")
		}
	}
	want := map[string]string{
		"QSTASH_TOKEN":               qstashdev.DefaultToken,
		"QSTASH_CURRENT_SIGNING_KEY": qstashdev.DefaultCurrentSigningKey,
		"QSTASH_NEXT_SIGNING_KEY":    qstashdev.DefaultNextSigningKey,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	base := env["QSTASH_URL"]
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("QSTASH_URL=%q", base)
	}

	client := &http.Client{}
	defer client.CloseIdleConnections()
	call := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+env["QSTASH_TOKEN"])
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, b := call(http.MethodGet, "/v2/keys", "")
	var keys struct{ Current, Next string }
	if status != http.StatusOK || json.Unmarshal(b, &keys) != nil || keys.Current != qstashdev.DefaultCurrentSigningKey {
		t.Fatalf("GET /v2/keys: %d %s", status, b)
	}
	if status, b := call(http.MethodPost, "/v2/publish/"+dest.URL+"/hook", "hello"); status != http.StatusOK {
		t.Fatalf("publish: %d %s", status, b)
	}
	select {
	case d := <-got:
		r := qstash.NewReceiver(env["QSTASH_CURRENT_SIGNING_KEY"], env["QSTASH_NEXT_SIGNING_KEY"])
		if err := r.Verify(qstash.VerifyOptions{Signature: d.sig, Url: dest.URL + "/hook", Body: d.body}); err != nil || d.body != "hello" {
			t.Fatalf("delivery %+v does not verify with the printed keys: %v", d, err)
		}
	case <-deadline:
		t.Fatal("message not delivered")
	}

	cancel() // what SIGINT does through signal.NotifyContext
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	for range lines {
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"extra"}, {"--concurrency", "-1", "--addr", "127.0.0.1:0"}} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
