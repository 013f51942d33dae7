package outboxkafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outboxkit/core"
)

// NewClient returns a kgo client for a Publisher, connected to the seed
// brokers (host:port). It sets what a relay wants and kgo does not
// default to, then applies opts, which win:
//
//   - kgo.ProducerLinger(0): the relay hands over whole batches, so
//     waiting for more records (kgo's default 10ms) only adds latency;
//   - kgo.ClientID("outboxkit-relay"), which brokers log and quota by.
//
// kgo's own defaults stay: the idempotent producer with acks from all
// in-sync replicas, unlimited retries within Publish's context, and the
// murmur2 key partitioner of Kafka's Java client. The caller owns the
// client: close it once the relay has stopped.
func NewClient(seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	if len(seeds) == 0 {
		return nil, &core.ConfigError{Field: "seeds", Reason: "is empty: give at least one broker as host:port"}
	}
	all := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ProducerLinger(0),
		kgo.ClientID("outboxkit-relay"),
	}, opts...)
	return kgo.NewClient(all...)
}

// checkClient refuses clients a Publisher cannot report truthfully
// through.
func checkClient(cl *kgo.Client) error {
	if cl == nil {
		return &core.ConfigError{Field: "client", Reason: "is nil: pass a *kgo.Client (outboxkafka.NewClient makes one)"}
	}
	if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return &core.ConfigError{Field: "client", Reason: "has idempotent writes disabled (kgo.DisableIdempotentWrite): a produce retried after a lost answer would then be written twice; drop the option"}
	}
	if v, _ := cl.OptValue(kgo.TransactionalID).(string); v != "" {
		return &core.ConfigError{Field: "client", Reason: "is transactional (kgo.TransactionalID): the relay produces outside transactions; use a client without it"}
	}
	if v, _ := cl.OptValue(kgo.ManualFlushing).(bool); v {
		return &core.ConfigError{Field: "client", Reason: "flushes manually (kgo.ManualFlushing): records would wait for a Flush the relay never calls; drop the option"}
	}
	return nil
}

var errNoTopic = errors.New("no topic for the event: its destination, the routes and its type are all empty")
