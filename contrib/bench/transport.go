package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// qstashResult is one drain through qstashdev.
type qstashResult struct {
	relaySeconds float64 // every row settled as published (QStash accepted it)
	e2eSeconds   float64 // every event delivered to the consumer endpoint
	procCPU      float64 // µs per event of this process: relay, qstashdev and consumer
	dbCPU        float64 // µs per event of the relay's PostgreSQL backends
	check        Check
}

// countingEndpoint is the consumer: it reads each delivery and counts
// distinct events by their CloudEvents id, taken from the signed body in
// structured mode (the publisher's default) and from the forwarded ce-id
// header in binary mode. It decodes as a real consumer must, but does not
// verify signatures: the receiver's cost is measured on its own.
type countingEndpoint struct {
	want       int64
	deliveries atomic.Int64
	mu         sync.Mutex
	seen       map[string]struct{}
	all        chan struct{}
}

func (c *countingEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.deliveries.Add(1)
	id := r.Header.Get("Ce-Id")
	if id == "" {
		e, err := qstash.DecodeStructuredEvent(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id = e.ID.String()
	}
	c.mu.Lock()
	_, dup := c.seen[id]
	c.seen[id] = struct{}{}
	n := len(c.seen)
	c.mu.Unlock()
	if !dup && int64(n) == c.want {
		close(c.all)
	}
}

func (c *countingEndpoint) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// drainQStash preloads the outbox and times core.Relay over postgres.Store
// publishing through qstash.Publisher (the /v2/batch API) to qstashdev,
// which signs and delivers each message to a counting endpoint; all three
// listen on 127.0.0.1 in this process.
func (b *bench) drainQStash(ctx context.Context, profile string) (qstashResult, error) {
	n := b.o.events
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return qstashResult{}, err
	}
	defer s.drop()
	if _, err := preloadOutbox(ctx, s, n); err != nil {
		return qstashResult{}, err
	}

	endpoint := &countingEndpoint{want: int64(n), seen: make(map[string]struct{}, n), all: make(chan struct{})}
	consumerLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return qstashResult{}, err
	}
	consumer := &http.Server{Handler: endpoint, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = consumer.Serve(consumerLn) }()
	defer consumer.Close()

	dev, err := qstashdev.New(qstashdev.Config{MaxEvents: 1000, MaxDeduplicationKeys: n + 1000,
		// The whole backlog may be pending at once: the default caps protect a
		// developer's machine, not a benchmark.
		MaxPendingMessages: n + 1000, MaxPendingBytes: int64(n+1000) * 4096})
	if err != nil {
		return qstashResult{}, err
	}
	defer dev.Close()
	devLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return qstashResult{}, err
	}
	go func() { _ = dev.Serve(devLn) }()

	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{
		BaseURL:      "http://" + devLn.Addr().String(),
		Token:        qstashdev.DefaultToken,
		Destination:  qstash.Target{URL: "http://" + consumerLn.Addr().String() + "/events"},
		MaxBatchSize: b.o.qsBatch,
	})
	if err != nil {
		return qstashResult{}, err
	}
	defer pub.Close()

	pool, err := newPool(ctx, b.o.dsn, int32(b.o.qsConc)+1)
	if err != nil {
		return qstashResult{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Schema: s.name, Notify: postgres.NotifyOff})
	if err != nil {
		return qstashResult{}, err
	}
	ctr := newSettleCounter(n)
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{
		BatchSize: b.o.qsBatch, Concurrency: b.o.qsConc, DisableNotifier: true,
		PollInterval: 10 * time.Millisecond, Hooks: []core.RelayHook{ctr},
	})
	if err != nil {
		return qstashResult{}, err
	}

	meter, err := newCPUMeter(ctx, pool)
	if err != nil {
		return qstashResult{}, err
	}
	stopProf := startProfile(profile)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- relay.Run(rctx) }()
	timeout := time.After(drainTimeout(n))
	var res qstashResult
	var waitErr error
	for relayDone, e2eDone := ctr.done, endpoint.all; (relayDone != nil || e2eDone != nil) && waitErr == nil; {
		select {
		case <-relayDone:
			res.relaySeconds = time.Since(start).Seconds()
			relayDone = nil
		case <-e2eDone:
			res.e2eSeconds = time.Since(start).Seconds()
			e2eDone = nil
		case <-timeout:
			waitErr = fmt.Errorf("qstash drain timed out: %d of %d settled, %d delivered", ctr.n.Load(), n, endpoint.distinct())
		case <-ctx.Done():
			waitErr = ctx.Err()
		}
	}
	procCPU, dbCPU := meter.stop()
	stopProf()
	cancel()
	<-runErr
	if waitErr != nil {
		return qstashResult{}, waitErr
	}
	res.procCPU, res.dbCPU = perEvent(procCPU, n), perEvent(dbCPU, n)
	left, err := pendingCount(ctx, s)
	if err != nil {
		return qstashResult{}, err
	}
	dlq := len(dev.DLQ())
	res.check = Check{OK: left == 0 && endpoint.distinct() == n && dlq == 0,
		Detail: fmt.Sprintf("%d of %d events delivered (%d deliveries), %d rows pending, %d in the DLQ", endpoint.distinct(), n, endpoint.deliveries.Load(), left, dlq)}
	return res, nil
}
