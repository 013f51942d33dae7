package qstash_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// A consumer endpoint applies each event once, however often it is
// delivered, refuses what QStash did not sign, and refuses a signed
// delivery sent a second time: QStash signs every attempt anew.
func ExampleReceiver() {
	const url = "https://billing.example.com/qstash/orders"
	mux := core.NewMux()
	mux.RegisterFunc("order.confirmed", func(ctx context.Context, e core.Event) error {
		d, _ := qstash.DeliveryFromContext(ctx)
		fmt.Printf("invoice for %s (attempt %d)\n", e.AggregateID, d.Retried+1)
		return nil
	})
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               url,
		Handler:           mux,
		Deduper:           memory.NewDeduper(),
		Consumer:          "billing",
	})
	if err != nil {
		panic(err)
	}

	e, _ := core.NewEvent("order.confirmed", map[string]string{"order": "o-42"})
	e.AggregateType, e.AggregateID = "order", "o-42"
	// The body the publisher sends: the event as a CloudEvents
	// structured-mode document, so QStash's signature covers its ID and type.
	body, _ := qstash.EncodeStructuredEvent(e)
	send := func(token string) {
		req := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", qstash.ContentTypeStructured)
		req.Header.Set("Upstash-Signature", token)
		w := httptest.NewRecorder()
		rc.ServeHTTP(w, req)
		var answer struct{ Status, Error string }
		_ = json.Unmarshal(w.Body.Bytes(), &answer)
		fmt.Println(w.Code, answer.Status+answer.Error)
	}
	first, _ := qstash.Signer{Key: qstashdev.DefaultCurrentSigningKey}.Sign(body, url)
	send(first)
	retry, _ := qstash.Signer{Key: qstashdev.DefaultNextSigningKey}.Sign(body, url)
	send(retry) // a redelivery, signed anew after a key rotation
	send(first) // the first delivery captured and sent again
	forged, _ := qstash.Signer{Key: "sig_notTheRightKey"}.Sign(body, url)
	send(forged)

	// Output:
	// invoice for o-42 (attempt 1)
	// 200 applied
	// 200 duplicate
	// 401 unauthorized
	// 401 unauthorized
}

// The relay's publisher and a consumer, with qstashdev standing in for
// QStash.
func ExamplePublisher() {
	dev, _ := qstashdev.New(qstashdev.Config{})
	devSrv := httptest.NewServer(dev.Handler())
	defer devSrv.Close()
	defer dev.Close()

	// The consumer; its URL is the signature's subject, so listen first.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	url := "http://" + ln.Addr().String() + "/qstash/orders"
	var mu sync.Mutex
	var applied []string
	rc, _ := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey,
		NextSigningKey:    qstashdev.DefaultNextSigningKey,
		URL:               url,
		Handler: core.HandlerFunc(func(_ context.Context, e core.Event) error {
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, e.AggregateID)
			return nil
		}),
		Deduper:  memory.NewDeduper(),
		Consumer: "billing",
	})
	consumer := &http.Server{Handler: rc}
	go consumer.Serve(ln)
	defer consumer.Close()

	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     devSrv.URL, // os.Getenv("QSTASH_URL") in a real program
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: url, Queue: "orders"}, // FIFO: one at a time, in order
	})
	if err != nil {
		panic(err)
	}
	defer pub.Close()

	var events []core.Event
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		e, _ := core.NewEvent("order.confirmed", map[string]string{"order": id})
		e.AggregateType, e.AggregateID = "order", id
		events = append(events, e)
	}
	fmt.Println("publish:", pub.Publish(context.Background(), events))
	fmt.Println("again:", pub.Publish(context.Background(), events)) // deduplicated by event ID
	_ = dev.WaitIdle(context.Background())
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("applied:", applied)

	// Output:
	// publish: <nil>
	// again: <nil>
	// applied: [o-1 o-2 o-3]
}
