package qstash_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

func BenchmarkVerify(b *testing.B) {
	v := newTestVerifier(b)
	body := []byte(`{"order":"o-1","total":42,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`)
	tok, err := qstash.Signer{Key: nextKey, Clock: fixedClock{testNow}}.Sign(body, endpointURL)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(tok, body, endpointURL); err != nil {
			b.Fatal(err)
		}
	}
}

// newBenchDev starts a qstashdev server. Messages are published with a
// one-day delay, so the benchmark measures the publish path alone (QStash
// accepting the batch), not deliveries competing for the same cores.
func newBenchDev(b *testing.B) (*qstashdev.Server, *qstash.Publisher) {
	b.Helper()
	dev, err := qstashdev.New(qstashdev.Config{MaxEvents: 1})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(dev.Handler())
	b.Cleanup(func() {
		_ = dev.Close()
		srv.Close()
	})
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:     srv.URL,
		Token:       qstashdev.DefaultToken,
		Destination: qstash.Target{URL: "http://127.0.0.1:9/never-delivered"},
		Delay:       24 * time.Hour,
		FlowControl: &qstash.FlowControl{Parallelism: 1},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	return dev, pub
}

// BenchmarkPublishToQStashDev publishes batches of 100 events to an
// in-process qstashdev. Run with -cpu 2 for the 2-core figure.
func BenchmarkPublishToQStashDev(b *testing.B) {
	_, pub := newBenchDev(b)
	batch := make([]core.Event, 100)
	b.ReportAllocs()
	for b.Loop() {
		for i := range batch {
			batch[i] = benchEvent(b)
		}
		if err := pub.Publish(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkRelayToQStashDev runs core.Relay (2 batches of 100 in flight,
// its defaults) with the Publisher into qstashdev: claim, publish, settle.
// The outbox is a slice-backed store whose Claim costs O(batch), so the
// figure is the relay → QStash path; adapters/memory's Store scans every row
// it ever held on each claim and would dominate a long run. One op is one
// event. Run with -cpu 2 for the 2-core figure.
func BenchmarkRelayToQStashDev(b *testing.B) {
	_, pub := newBenchDev(b)
	evs := make([]core.Event, b.N)
	for i := range evs {
		evs[i] = benchEvent(b)
	}
	store := &sliceStore{events: evs, done: make(chan struct{})}
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{BatchSize: 100, DisableNotifier: true, PollInterval: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	errc := make(chan error, 1)
	go func() { errc <- relay.Run(ctx) }()
	<-store.done
	b.StopTimer()
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	if store.failed.Load() != 0 {
		b.Fatalf("%d events not published", store.failed.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// sliceStore hands out events from a slice and closes done once every event
// is settled.
type sliceStore struct {
	mu      sync.Mutex
	events  []core.Event
	next    int
	settled int
	failed  atomic.Int64
	done    chan struct{}
}

func (s *sliceStore) Claim(_ context.Context, req core.ClaimRequest) (core.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(req.Limit, len(s.events)-s.next)
	b := core.Batch{Lease: core.Lease{Token: core.NewID(), Until: time.Now().Add(req.LeaseFor)}, Events: s.events[s.next : s.next+n]}
	s.next += n
	return b, nil
}

func (s *sliceStore) Settle(_ context.Context, req core.SettleRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range req.Outcomes {
		if o.Kind != core.Published {
			s.failed.Add(1)
		}
	}
	s.settled += len(req.Outcomes)
	if s.settled == len(s.events) {
		close(s.done)
	}
	return nil
}

func benchEvent(tb testing.TB) core.Event {
	e, err := core.NewEvent("order.confirmed", []byte(`{"order":"o-1","total":42,"currency":"EUR"}`))
	if err != nil {
		tb.Fatal(err)
	}
	e.Source = "shop"
	e.AggregateType = "order"
	e.AggregateID = e.ID.String()[:13]
	e.CreatedAt = time.Now()
	e.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	return e
}

// BenchmarkPublishBatch measures the publisher's own cost per event: batches
// of 100 to a fake QStash that answers without parsing the request, so the
// server's JSON decoding does not compete for the cores.
func BenchmarkPublishBatch(b *testing.B) {
	answer := []byte("[" + strings.TrimSuffix(strings.Repeat(`{"messageId":"msg_1"},`, 100), ",") + "]")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL: srv.URL, Token: testToken, Destination: qstash.Target{URL: endpointURL},
		FlowControl: &qstash.FlowControl{Parallelism: 1},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	batch := make([]core.Event, 100)
	for i := range batch {
		batch[i] = benchEvent(b)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := pub.Publish(context.Background(), batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
}
