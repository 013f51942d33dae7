package main

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	"github.com/outboxkit/outboxkit/core"
)

// defaultKafkaBrokers is where --transport kafka looks without
// --kafka-brokers or OUTBOX_KAFKA_BROKERS.
const defaultKafkaBrokers = "127.0.0.1:9092"

// kafkaFlags are --transport kafka's flags.
type kafkaFlags struct {
	brokers    string
	autoCreate bool
}

func (k *kafkaFlags) register(fs *flagSet, getenv func(string) string) {
	fs.StringVar(&k.brokers, "kafka-brokers", envOr(getenv, "OUTBOX_KAFKA_BROKERS", defaultKafkaBrokers),
		"kafka: seed `brokers`, comma-separated host:port (env OUTBOX_KAFKA_BROKERS)")
	fs.BoolVar(&k.autoCreate, "kafka-auto-create-topics", false,
		"kafka: let the brokers create missing topics (their auto.create.topics.enable must allow it; partitions and replication are then the brokers' defaults)")
}

// kafkaSeeds parses --kafka-brokers.
func kafkaSeeds(s string) ([]string, error) {
	var seeds []string
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return nil, usageError(fmt.Sprintf("--kafka-brokers: %q is not host:port (give brokers as kafka-1:9092,kafka-2:9092)", b))
		}
		seeds = append(seeds, b)
	}
	if len(seeds) == 0 {
		return nil, usageError("--kafka-brokers is empty: give the seed brokers as host:port,host:port (or set OUTBOX_KAFKA_BROKERS)")
	}
	return seeds, nil
}

// kafkaPublisher relays to Kafka: one record per event, keyed by its
// aggregate (else its ID), on the topic topicFunc picks, through the
// idempotent producer (adapters/kafka). Its result has the underlying
// type of connector.
func (a *app) kafkaPublisher(t *transportFlags, k *kafkaFlags, routes map[string]route) (func(context.Context) (core.Publisher, func(context.Context) error, func(), error), error) {
	seeds, err := kafkaSeeds(k.brokers)
	if err != nil {
		return nil, err
	}
	topic, err := topicFunc(t, routes)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (core.Publisher, func(context.Context) error, func(), error) {
		var opts []kgo.Opt
		if k.autoCreate {
			opts = append(opts, kgo.AllowAutoTopicCreation())
		}
		cl, err := outboxkafka.NewClient(seeds, opts...)
		if err != nil {
			return nil, nil, nil, usageError(fmt.Sprintf("--kafka-brokers: %v", err))
		}
		pctx, cancel := context.WithTimeout(ctx, preflightTimeout)
		err = cl.Ping(pctx)
		cancel()
		if err != nil {
			cl.Close()
			return nil, nil, nil, fmt.Errorf("cannot reach Kafka at %s: %s — is it running? set --kafka-brokers or OUTBOX_KAFKA_BROKERS", strings.Join(seeds, ","), netCause(err))
		}
		pub, err := outboxkafka.NewPublisher(cl, &outboxkafka.PublisherConfig{Topic: topic})
		if err != nil {
			cl.Close()
			return nil, nil, nil, err
		}
		// Ping asks one broker for its API versions: cheap, and it fails
		// only when none of them answers.
		probe := func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
			defer cancel()
			if err := cl.Ping(ctx); err != nil {
				return fmt.Errorf("cannot reach Kafka at %s: %s", strings.Join(seeds, ","), netCause(err))
			}
			return nil
		}
		return pub, probe, cl.Close, nil
	}, nil
}
