package main

import (
	"context"
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
