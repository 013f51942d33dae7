package qstash_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// capturedDelivery is a delivery request as it crossed the wire.
type capturedDelivery struct {
	header http.Header
	body   []byte
}

// TestCapturedDeliveryCannotBeReplayedOrRetyped is the attack from the
// hardening issue, end to end with default configurations: a publisher
// relays an order.confirmed event through qstashdev to a receiver; whoever
// captured that delivery (its token and body) sends it again within the
// token's five minutes, five times with a fresh ce-id and once relabelled
// ce-type: order.refunded. The effect must apply once and the refund
// handler must never run: the event's identity and type come from what
// QStash signed, and a token already seen is refused.
func TestCapturedDeliveryCannotBeReplayedOrRetyped(t *testing.T) {
	t.Parallel()
	dev, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.0001})
	if err != nil {
		t.Fatal(err)
	}
	devSrv := httptest.NewServer(dev.Handler())
	t.Cleanup(func() {
		_ = dev.Close()
		devSrv.Close()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/hooks/orders"

	var mu sync.Mutex
	confirmed, refunded := map[core.ID]int{}, 0
	mux := core.NewMux()
	mux.RegisterFunc("order.confirmed", func(_ context.Context, e core.Event) error {
		mu.Lock()
		defer mu.Unlock()
		confirmed[e.ID]++
		return nil
	})
	mux.RegisterFunc("order.refunded", func(context.Context, core.Event) error {
		mu.Lock()
		defer mu.Unlock()
		refunded++
		return nil
	})
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               url,
		Handler:           mux,
		Deduper:           &recordingDeduper{},
		Consumer:          "billing",
	})
	if err != nil {
		t.Fatal(err)
	}
	var captured []capturedDelivery
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		captured = append(captured, capturedDelivery{r.Header.Clone(), body})
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rc.ServeHTTP(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{BaseURL: devSrv.URL, Token: qstashdev.DefaultToken, Destination: qstash.Target{URL: url}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	e := testEvent(t)
	if err := pub.Publish(context.Background(), []core.Event{e}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20e9)
	defer cancel()
	if err := dev.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(captured) != 1 || confirmed[e.ID] != 1 {
		mu.Unlock()
		t.Fatalf("%d deliveries, applied %d times; want the event delivered and applied once", len(captured), confirmed[e.ID])
	}
	orig := captured[0]
	mu.Unlock()

	replay := func(mutate func(http.Header)) int {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(orig.body))
		req.Header = orig.header.Clone()
		mutate(req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 5 {
		replay(func(h http.Header) { h.Set("Ce-Id", core.NewID().String()) })
	}
	replay(func(h http.Header) {
		h.Set("Ce-Id", core.NewID().String())
		h.Set("Ce-Type", "order.refunded")
	})

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range confirmed {
		total += n
	}
	if total != 1 {
		t.Errorf("order.confirmed applied %d times in all (%d distinct IDs), want once", total, len(confirmed))
	}
	if refunded != 0 {
		t.Errorf("the refund handler ran %d times for a relabelled order.confirmed delivery", refunded)
	}
}
