package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// The brokers .ci/services.sh runs on 127.0.0.1. Like PostgreSQL, they are
// required: these tests fail, never skip, when a broker is down.
const (
	testNATSURL = "nats://127.0.0.1:4222"
	testAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
)

// TestRelayToNATSJetStream relays with --transport nats into a stream the
// relay provisions, then replays and relays again: the stream must not
// grow, because every message carries the event ID as Nats-Msg-Id.
func TestRelayToNATSJetStream(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(testNATSURL)
	if err != nil {
		t.Fatalf("NATS at %s is unreachable (%v): start it (.ci/services.sh does)", testNATSURL, err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	// Auto-provisioned streams are named after the topic, which therefore
	// has no dots.
	topic := pgtest.NewSchemaName("outboxctl_nats")
	t.Cleanup(func() { _ = js.DeleteStream(topic) })

	o := newOutbox(t)
	ids := o.insertSQL(t, 7, "order.placed")
	args := o.args("relay", "--transport", "nats", "--nats-url", testNATSURL, "--nats-auto-provision", "--destination", topic, "--drain")
	r := cli(t, env(), args...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "drained 7 event(s)") {
		t.Errorf("relay --drain: %q", r.stdout)
	}
	info, err := js.StreamInfo(topic)
	if err != nil || info.State.Msgs != uint64(len(ids)) {
		t.Fatalf("stream %s: %v, %+v; want %d messages", topic, err, info, len(ids))
	}
	var got, want []string
	for seq := uint64(1); seq <= info.State.Msgs; seq++ {
		m, err := js.GetMsg(topic, seq)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Header.Get(nats.MsgIdHdr))
	}
	for _, id := range ids {
		want = append(want, id.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Nats-Msg-Id headers %v, want the event IDs %v", got, want)
	}

	wantOK(t, cli(t, env(), o.args("replay", "--all")...))
	wantOK(t, cli(t, env(), args...))
	if info, err := js.StreamInfo(topic); err != nil || info.State.Msgs != uint64(len(ids)) {
		t.Errorf("after a replay the stream holds %d messages (%v), want still %d: JetStream should drop them by ID", info.State.Msgs, err, len(ids))
	}

	r = cli(t, env(), o.args("relay", "--transport", "nats", "--nats-url", "nats://127.0.0.1:1", "--drain")...)
	wantOneLineError(t, r, exitError, "cannot reach NATS at nats://127.0.0.1:1", "NATS_URL")
}

// TestRelayToAMQP relays with --transport amqp to a fanout exchange named
// after the topic, read through a queue bound to it.
func TestRelayToAMQP(t *testing.T) {
	t.Parallel()
	conn, err := amqp.Dial(testAMQPURL)
	if err != nil {
		t.Fatalf("RabbitMQ at 127.0.0.1:5672 is unreachable (%v): start it (.ci/services.sh does)", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	exchange := pgtest.NewSchemaName("outboxctl.amqp")
	// Declared as the relay declares it (durable fanout), so both agree.
	if err := ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "", exchange, false, nil); err != nil {
		t.Fatal(err)
	}

	o := newOutbox(t)
	e := event(t, "order.placed", "order", "42")
	o.add(t, e)
	ids := append([]core.ID{e.ID}, o.insertSQL(t, 4, "order.placed")...)
	r := cli(t, env("AMQP_URL="+testAMQPURL), o.args("relay", "--transport", "amqp", "--destination", exchange, "--drain")...)
	wantOK(t, r)

	got := map[string]amqp.Delivery{}
	waitFor(t, 20*time.Second, "the relayed messages in the bound queue", func() bool {
		for {
			d, ok, err := ch.Get(q.Name, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return len(got) == len(ids)
			}
			got[d.MessageId] = d
		}
	})
	for _, id := range ids {
		if _, ok := got[id.String()]; !ok {
			t.Errorf("event %s not in the queue (message IDs: %v)", id, keys(got))
		}
	}
	// CloudEvents attributes travel as message headers.
	if d := got[e.ID.String()]; d.Headers["ce-type"] != "order.placed" || d.Headers["ce-subject"] != "42" {
		t.Errorf("message headers %v lack the CloudEvents attributes", d.Headers)
	}

	r = cli(t, env(), o.args("relay", "--transport", "amqp", "--amqp-url", "amqp://guest:pw-s3cret@127.0.0.1:1/", "--drain")...)
	wantOneLineError(t, r, exitError, "cannot reach AMQP at amqp://guest:***@127.0.0.1:1/", "AMQP_URL")
	if strings.Contains(r.stderr, "pw-s3cret") {
		t.Errorf("the password leaked: %s", r.stderr)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
