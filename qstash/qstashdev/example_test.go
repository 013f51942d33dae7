package qstashdev_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// A test publishes through qstashdev to its own handler and waits for the
// delivery to settle.
func Example() {
	srv, err := qstashdev.New(qstashdev.Config{BackoffScale: 0.001})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	api := httptest.NewServer(srv.Handler())
	defer api.Close()

	attempts := 0
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		attempts++
		fmt.Printf("attempt %s: %s %s (%s)\n", r.Header.Get("Upstash-Retried"), r.Method, body, r.Header.Get("Ce-Type"))
		if attempts == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // retried after 12ms
		}
	}))
	defer dest.Close()

	req, _ := http.NewRequest(http.MethodPost, api.URL+"/v2/publish/"+dest.URL+"/orders", strings.NewReader(`{"id":1}`))
	req.Header.Set("Authorization", "Bearer "+qstashdev.DefaultToken)
	req.Header.Set("Upstash-Forward-Ce-Type", "order.created")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	defer http.DefaultClient.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitIdle(ctx); err != nil {
		panic(err)
	}
	fmt.Println("dead letters:", len(srv.DLQ()))
	// Output:
	// attempt 0: POST {"id":1} (order.created)
	// attempt 1: POST {"id":1} (order.created)
	// dead letters: 0
}
