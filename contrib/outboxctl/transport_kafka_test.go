package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	"github.com/outboxkit/outboxkit/internal/kafkatest"
	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// TestRelayToKafka relays with --transport kafka to a three-broker kfake
// cluster in the test process: every event arrives once, keyed, with its
// ce_id; an unreachable cluster and a malformed broker list are one-line
// errors naming the flag.
func TestRelayToKafka(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, 3, 3)
	topic := pgtest.NewSchemaName("outboxctl_kafka")
	col := kafkatest.Collect(t, c.Seeds(), topic)

	o := newOutbox(t)
	ids := o.insertSQL(t, 7, "order.placed")
	r := cli(t, env(), o.args("relay", "--transport", "kafka", "--kafka-brokers", strings.Join(c.Seeds(), ","),
		"--kafka-auto-create-topics", "--destination", topic, "--drain")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "drained 7 event(s)") {
		t.Errorf("relay --drain: %q", r.stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := col.WaitFor(ctx, len(ids)); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, rec := range col.Records() {
		e, err := outboxkafka.EventFromRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Key) != e.ID.String() { // no aggregate: keyed by ID
			t.Errorf("record key %q for event %s", rec.Key, e.ID)
		}
		got = append(got, e.ID.String())
	}
	for _, id := range ids {
		want = append(want, id.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("records carry events %v, want %v", got, want)
	}

	r = cli(t, env(), o.args("relay", "--transport", "kafka", "--kafka-brokers", "127.0.0.1:1", "--drain")...)
	wantOneLineError(t, r, exitError, "cannot reach Kafka at 127.0.0.1:1", "OUTBOX_KAFKA_BROKERS")
	r = cli(t, env("OUTBOX_KAFKA_BROKERS=kafka-without-port"), o.args("relay", "--transport", "kafka", "--drain")...)
	wantOneLineError(t, r, exitError, "--kafka-brokers", "kafka-without-port")
}
