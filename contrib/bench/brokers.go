package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/kafkatest"
	"github.com/outboxkit/outboxkit/postgres"
)

// The brokers workload (-workloads brokers) drains the preloaded outbox
// through the relay to a broker, NATS JetStream and Kafka side by side,
// with the relay configuration of the qstash workload (-qstash-batch,
// -qstash-concurrency):
//
//   - nats: as outboxctl relay --transport nats publishes (the Watermill
//     NATS publisher over JetStream, the event ID as Nats-Msg-Id, one
//     acknowledged publish per event) into a file-backed stream of its
//     own, on the nats-server at NATS_URL (default nats://127.0.0.1:4222,
//     which .ci/services.sh runs);
//   - kafka: as outboxctl relay --transport kafka does (adapters/kafka:
//     one record per event, idempotent producer, acks from all in-sync
//     replicas, every produce result awaited) to a six-partition topic of
//     a three-broker kfake cluster in this process (no Kafka broker
//     package is available here; kfake keeps records in memory).
//
// Each is timed from the relay's start until every row is settled as
// published, and until the broker holds every event (stream messages;
// the topic's end offsets). Go CPU is this process's, so for kafka it
// includes the brokers' work, and for nats it does not (nats-server is a
// process of its own).
const (
	transportKafka   = "kafka"
	brokerWorkload   = "brokers"
	brokerPartitions = 6
)

type brokerResult struct {
	relaySeconds, heldSeconds float64
	procCPU, dbCPU            float64
	check                     Check
}

func (b *bench) runBrokers(ctx context.Context) error {
	n := b.o.events
	cas := fmt.Sprintf("batch=%d concurrency=%d", b.o.qsBatch, b.o.qsConc)
	for rep := 0; rep < b.o.reps; rep++ {
		for _, tr := range []string{"nats", transportKafka} {
			res, err := attempt(ctx, b, fmt.Sprintf("brokers %s rep %d", tr, rep+1), func() (brokerResult, error) {
				return b.drainBroker(ctx, tr)
			})
			if err != nil {
				return fmt.Errorf("%s: %w", tr, err)
			}
			sys := sysOutboxkit + " → " + tr
			b.logf("brokers %s rep %d: relay %.0f events/s, held by the broker %.0f events/s", tr, rep+1, float64(n)/res.relaySeconds, float64(n)/res.heldSeconds)
			b.rep.add(brokerWorkload, cas, sys, "relay events/s", float64(n)/res.relaySeconds)
			b.rep.add(brokerWorkload, cas, sys, "held events/s", float64(n)/res.heldSeconds)
			b.rep.add(brokerWorkload, cas, sys, "Go CPU µs/event", res.procCPU)
			b.rep.add(brokerWorkload, cas, sys, "PG CPU µs/event", res.dbCPU)
			res.check.Workload, res.check.Case, res.check.System, res.check.Rep = brokerWorkload, cas, sys, rep+1
			b.rep.check(res.check)
		}
	}
	for _, m := range []string{"relay events/s", "held events/s", "Go CPU µs/event", "PG CPU µs/event"} {
		b.rep.ratio(brokerWorkload, cas, "kafka (kfake) / nats, "+m, m, sysOutboxkit+" → "+transportKafka, sysOutboxkit+" → nats")
	}
	return nil
}

// brokerSink is a broker to relay to and how many events it holds.
type brokerSink struct {
	pub   core.Publisher
	held  func(ctx context.Context) (int64, error)
	close func()
}

func natsSink(ctx context.Context) (*brokerSink, error) {
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, nats.Name("outboxkit-bench brokers"))
	if err != nil {
		return nil, fmt.Errorf("NATS at %s: %w (start nats-server -js, or leave brokers out of -workloads)", url, err)
	}
	js, err := nc.JetStream(nats.Context(ctx))
	if err != nil {
		nc.Close()
		return nil, err
	}
	subject := fmt.Sprintf("bench_brokers_%d", time.Now().UnixNano())
	if _, err := js.AddStream(&nats.StreamConfig{Name: subject, Subjects: []string{subject}, Storage: nats.FileStorage}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("NATS JetStream at %s: create stream: %w", url, err)
	}
	wp, err := wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
		Marshaler: &wmnats.NATSMarshaler{}, SubjectCalculator: wmnats.DefaultSubjectCalculator,
		JetStream: wmnats.JetStreamConfig{TrackMsgId: true},
	}, watermill.NopLogger{})
	if err != nil {
		_ = js.DeleteStream(subject)
		nc.Close()
		return nil, err
	}
	pub, err := outboxwatermill.NewPublisher(wp, &outboxwatermill.PublisherConfig{Topic: func(core.Event) string { return subject }})
	if err != nil {
		_ = wp.Close()
		_ = js.DeleteStream(subject)
		nc.Close()
		return nil, err
	}
	return &brokerSink{
		pub: pub,
		held: func(ctx context.Context) (int64, error) {
			info, err := js.StreamInfo(subject, nats.Context(ctx))
			if err != nil {
				return 0, err
			}
			return int64(info.State.Msgs), nil
		},
		close: func() {
			_ = wp.Close()
			_ = js.DeleteStream(subject)
			nc.Close()
		},
	}, nil
}

func kafkaSink() (*brokerSink, error) {
	c, err := kafkatest.Start(3, brokerPartitions)
	if err != nil {
		return nil, err
	}
	topic := fmt.Sprintf("bench-brokers-%d", time.Now().UnixNano())
	cl, err := outboxkafka.NewClient(c.Seeds())
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := kafkatest.CreateTopic(context.Background(), cl, topic, brokerPartitions); err != nil {
		cl.Close()
		c.Close()
		return nil, err
	}
	pub, err := outboxkafka.NewPublisher(cl, &outboxkafka.PublisherConfig{Topic: func(core.Event) string { return topic }})
	if err != nil {
		cl.Close()
		c.Close()
		return nil, err
	}
	return &brokerSink{
		pub: pub,
		held: func(ctx context.Context) (int64, error) {
			n, _, err := kafkatest.EndOffsets(ctx, cl, topic)
			return n, err
		},
		close: func() { cl.Close(); c.Close() },
	}, nil
}

// drainBroker preloads the outbox and times core.Relay over
// postgres.Store publishing to the broker tr.
func (b *bench) drainBroker(ctx context.Context, tr string) (brokerResult, error) {
	n := b.o.events
	s, err := b.outboxSchema(ctx)
	if err != nil {
		return brokerResult{}, err
	}
	defer s.drop()
	if _, err := preloadOutbox(ctx, s, n); err != nil {
		return brokerResult{}, err
	}
	var sink *brokerSink
	if tr == transportKafka {
		sink, err = kafkaSink()
	} else {
		sink, err = natsSink(ctx)
	}
	if err != nil {
		return brokerResult{}, err
	}
	defer sink.close()

	pool, err := newPool(ctx, b.o.dsn, int32(b.o.qsConc)+1)
	if err != nil {
		return brokerResult{}, err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Schema: s.name, Notify: postgres.NotifyOff})
	if err != nil {
		return brokerResult{}, err
	}
	ctr := newSettleCounter(n)
	relay, err := core.NewRelay(store, sink.pub, &core.RelayConfig{
		BatchSize: b.o.qsBatch, Concurrency: b.o.qsConc, DisableNotifier: true,
		PollInterval: 10 * time.Millisecond, Hooks: []core.RelayHook{ctr},
	})
	if err != nil {
		return brokerResult{}, err
	}
	meter, err := newCPUMeter(ctx, pool)
	if err != nil {
		return brokerResult{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- relay.Run(rctx) }()
	deadline := time.Now().Add(drainTimeout(n))
	var res brokerResult
	var waitErr error
	select {
	case <-ctr.done:
		res.relaySeconds = time.Since(start).Seconds()
	case <-time.After(time.Until(deadline)):
		waitErr = fmt.Errorf("%s drain timed out: %d of %d settled", tr, ctr.n.Load(), n)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	// Every row settled means every publish was acknowledged: the broker
	// holds each event already, which this confirms from its side.
	var held int64
	for waitErr == nil {
		if held, err = sink.held(ctx); err == nil && held >= int64(n) {
			res.heldSeconds = time.Since(start).Seconds()
			break
		}
		if time.Now().After(deadline) {
			waitErr = fmt.Errorf("%s holds %d of %d events (%v)", tr, held, n, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the broker's count
	}
	procCPU, dbCPU := meter.stop()
	cancel()
	<-runErr
	if waitErr != nil {
		return brokerResult{}, waitErr
	}
	res.procCPU, res.dbCPU = perEvent(procCPU, n), perEvent(dbCPU, n)
	left, err := pendingCount(ctx, s)
	if err != nil {
		return brokerResult{}, err
	}
	res.check = Check{OK: left == 0 && held == int64(n) && ctr.lost.Load() == 0,
		Detail: fmt.Sprintf("%d of %d events held by %s, %d rows pending, %d settles lost", held, n, tr, left, ctr.lost.Load())}
	return res, nil
}
