package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// TestQStashDevSubcommand runs the local-development setup the way a
// developer does: outboxctl qstash-dev in one terminal, its export lines
// in another, a relay there, and a consumer verifying signatures with the
// printed keys.
func TestQStashDevSubcommand(t *testing.T) {
	t.Parallel()
	dev := start(t, env(), "qstash-dev", "--addr", "127.0.0.1:0")
	exports := map[string]string{}
	waitFor(t, 20*time.Second, "qstash-dev's export lines", func() bool {
		if dev.exited() {
			t.Fatalf("qstash-dev exited (code %d): %s", dev.code, dev.stderr)
		}
		for _, line := range strings.Split(dev.stdout.String(), "\n") {
			if kv, ok := strings.CutPrefix(line, "export "); ok {
				k, v, _ := strings.Cut(kv, "=")
				exports[k] = v
			}
		}
		return len(exports) == 4
	})
	if exports["QSTASH_TOKEN"] != qstashdev.DefaultToken || exports["QSTASH_CURRENT_SIGNING_KEY"] != qstashdev.DefaultCurrentSigningKey ||
		exports["QSTASH_NEXT_SIGNING_KEY"] != qstashdev.DefaultNextSigningKey || !strings.HasPrefix(exports["QSTASH_URL"], "http://127.0.0.1:") {
		t.Fatalf("exports = %v", exports)
	}

	var mu sync.Mutex
	got := map[core.ID]bool{}
	var recv atomic.Pointer[qstash.Receiver]
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { recv.Load().ServeHTTP(w, r) }))
	defer consumer.Close()
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: exports["QSTASH_CURRENT_SIGNING_KEY"], NextSigningKey: exports["QSTASH_NEXT_SIGNING_KEY"],
		URL: consumer.URL + "/hook", Deduper: memory.NewDeduper(), Consumer: "dev",
		Handler: core.HandlerFunc(func(_ context.Context, e core.Event) error {
			mu.Lock()
			defer mu.Unlock()
			got[e.ID] = true
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	recv.Store(rc)

	o := newOutbox(t)
	ids := o.insertSQL(t, 5, "dev.event")
	r := cli(t, env("QSTASH_URL="+exports["QSTASH_URL"], "QSTASH_TOKEN="+exports["QSTASH_TOKEN"]),
		o.args("relay", "--destination", consumer.URL+"/hook", "--drain")...)
	wantOK(t, r)
	waitFor(t, 20*time.Second, "deliveries through qstash-dev", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(ids)
	})

	dev.signal(t, syscall.SIGTERM)
	if code := dev.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("qstash-dev exited %d after SIGTERM: %s", code, dev.stderr)
	}

	// A busy address is a one-line error.
	addr := strings.TrimPrefix(consumer.URL, "http://")
	r = cli(t, env(), "qstash-dev", "--addr", addr)
	wantOneLineError(t, r, exitError, "cannot listen on "+addr, "--addr")
}

// qstashDevExports starts qstash-dev with args and returns its export lines
// once printed.
func qstashDevExports(t *testing.T, args ...string) (*proc, map[string]string) {
	t.Helper()
	dev := start(t, env(), append([]string{"qstash-dev"}, args...)...)
	exports := map[string]string{}
	waitFor(t, 20*time.Second, "qstash-dev's export lines", func() bool {
		if dev.exited() {
			t.Fatalf("qstash-dev %v exited (code %d): %s", args, dev.code, dev.stderr)
		}
		for _, line := range strings.Split(dev.stdout.String(), "\n") {
			if kv, ok := strings.CutPrefix(line, "export "); ok {
				k, v, _ := strings.Cut(kv, "=")
				exports[k] = v
			}
		}
		return len(exports) == 4
	})
	return dev, exports
}

// getKeys calls GET /v2/keys on the loopback side of a qstash-dev address.
func getKeys(t *testing.T, qstashURL, token string) int {
	t.Helper()
	u := strings.Replace(strings.Replace(qstashURL, "[::]", "127.0.0.1", 1), "0.0.0.0", "127.0.0.1", 1)
	req, err := http.NewRequest(http.MethodGet, u+"/v2/keys", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s/v2/keys: %v", u, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// The dev token is printed in Upstash's documentation: qstash-dev serves
// with it on loopback only, and elsewhere only with --token.
func TestQStashDevPublicTokenOffLoopback(t *testing.T) {
	t.Parallel()
	r := cli(t, env(), "qstash-dev", "--addr", "0.0.0.0:0")
	wantOneLineError(t, r, exitError, "public", "--token", "127.0.0.1")
	if strings.Contains(r.stdout, "export") {
		t.Errorf("a refused qstash-dev printed credentials: %s", r.stdout)
	}

	for _, tc := range []struct {
		name, token string
		args        []string
	}{
		{"loopback with the dev token", qstashdev.DefaultToken, []string{"--addr", "127.0.0.1:0"}},
		{"all interfaces with a token of its own", "tok-of-my-own", []string{"--addr", "0.0.0.0:0", "--token", "tok-of-my-own"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dev, exports := qstashDevExports(t, tc.args...)
			if exports["QSTASH_TOKEN"] != tc.token {
				t.Fatalf("QSTASH_TOKEN=%s, want %s", exports["QSTASH_TOKEN"], tc.token)
			}
			if status := getKeys(t, exports["QSTASH_URL"], tc.token); status != http.StatusOK {
				t.Fatalf("GET /v2/keys with the printed token: %d", status)
			}
			dev.signal(t, syscall.SIGTERM)
			if code := dev.wait(t, 20*time.Second); code != 0 {
				t.Fatalf("qstash-dev exited %d after SIGTERM: %s", code, dev.stderr)
			}
		})
	}
}
