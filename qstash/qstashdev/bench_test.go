package qstashdev_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// BenchmarkBatchDelivery measures the relay path end to end over loopback:
// batches of 100 CloudEvents-shaped messages posted to /v2/batch, each
// delivered (signed, forwarded headers, its own HTTP request) to an
// httptest receiver. One op is one batch; events/s counts deliveries.
//
//	go test -run '^$' -bench BatchDelivery -cpu 2 ./qstash/qstashdev/
func BenchmarkBatchDelivery(b *testing.B) {
	var received atomic.Int64
	recv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		received.Add(1)
	}))
	recv.Start()
	defer recv.Close()

	srv, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	api := httptest.NewServer(srv.Handler())
	defer api.Close()

	const perBatch = 100
	// The payload is appended by hand: the harness should cost little next
	// to the server it measures.
	client := api.Client()
	var payload []byte
	post := func(n int) {
		payload = append(payload[:0], '[')
		for i := range perBatch {
			if i > 0 {
				payload = append(payload, ',')
			}
			// Fresh deduplication ids per batch, or QStash semantics would
			// drop every batch after the first.
			payload = fmt.Appendf(payload, `{"destination":%q,"headers":{`+
				`"Content-Type":"application/json",`+
				`"Upstash-Deduplication-Id":"ev-%d-%d",`+
				`"Upstash-Retries":"3",`+
				`"Upstash-Forward-Ce-Id":"0190b6d2-7c1e-7000-8000-%012d",`+
				`"Upstash-Forward-Ce-Type":"order.created",`+
				`"Upstash-Forward-Ce-Source":"bench",`+
				`"Upstash-Forward-Ce-Specversion":"1.0",`+
				`"Upstash-Forward-Traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},`+
				`"body":"{\"orderId\":\"o-%d\",\"customer\":\"c-42\",\"amount\":1999,\"currency\":\"EUR\",\"items\":[{\"sku\":\"a\",\"qty\":1}]}",`+
				`"queue":""}`, recv.URL+"/events", n, i, n*perBatch+i, n*perBatch+i)
		}
		payload = append(payload, ']')
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v2/batch", bytes.NewReader(payload))
		req.Header.Set("Authorization", "Bearer "+qstashdev.DefaultToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("batch: %d", resp.StatusCode)
		}
	}

	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		post(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := srv.WaitIdle(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if got, want := received.Load(), int64(b.N*perBatch); got != want {
		b.Fatalf("received %d deliveries, want %d", got, want)
	}
	b.ReportMetric(float64(b.N*perBatch)/elapsed.Seconds(), "events/s")
	// CPU per event (server, receiver and harness together) does not depend
	// on what else the machine runs: 2 cores / this = the events/s an idle
	// 2-core machine can reach.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*perBatch), "cpu-µs/event")
	if len(srv.DLQ()) != 0 {
		b.Fatal("deliveries failed into the DLQ")
	}
}

// processCPU is the user plus system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
