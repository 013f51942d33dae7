package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"

	outboxkafka "github.com/outboxkit/outboxkit/adapters/kafka"
	outboxwatermill "github.com/outboxkit/outboxkit/adapters/watermill"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
)

// The capacity mode runs every relay it measures in a process of its own
// (this program re-executed with -role capacity-relay), so that the
// process's getrusage is the relay's CPU alone: the relay, the store's pgx
// client and the transport's client, without the harness, the writers,
// qstashdev or the consumer endpoint beside it. The parent sends a
// capRelaySpec as one JSON line, the child answers "ready", the parent
// "go", and the child answers "done <capRelayResult>" once it has settled
// Events events (or when the parent says "stop"), then stops its relay
// and exits.

// capacityRelayRole is the -role of a capacity relay process.
const capacityRelayRole = "capacity-relay"

// Transports the capacity mode drives.
const (
	transportNoop   = "noop"
	transportQStash = "qstashdev"
	transportNATS   = "nats"
	// capKafka is Kafka's protocol through adapters/kafka, to a kfake
	// cluster in the parent process (internal/kafkatest): no Kafka broker
	// package is available here.
	capKafka = "kafka"
)

// capRelaySpec configures one relay process.
type capRelaySpec struct {
	DSN         string `json:"dsn"`
	Schema      string `json:"schema"`
	App         string `json:"app"`
	Batch       int    `json:"batch"`
	Concurrency int    `json:"concurrency"`
	// Events ends the measurement once settled; 0 waits for "stop".
	Events int64 `json:"events"`
	// Wakeup is "" (no notifier, a 10 ms poll: a drain), or the store's
	// wake-up with the relay's defaults otherwise: "wal" (WakeupAuto),
	// "listen", "poll".
	Wakeup    string `json:"wakeup"`
	Transport string `json:"transport"`
	// qstashdev: the API's URL, its token and the consumer's URL.
	QStashURL         string `json:"qstash_url,omitempty"`
	QStashToken       string `json:"qstash_token,omitempty"`
	QStashDestination string `json:"qstash_destination,omitempty"`
	// NATS: the server and the subject (a stream covering it exists).
	NATSURL     string `json:"nats_url,omitempty"`
	NATSSubject string `json:"nats_subject,omitempty"`
	// Kafka: the seed brokers and the topic (it exists).
	KafkaSeeds []string `json:"kafka_seeds,omitempty"`
	KafkaTopic string   `json:"kafka_topic,omitempty"`
	// Measure: the relay starts at "go" and the measurement at a later
	// "measure" (once the parent has seen its wake-up connection up).
	Measure bool `json:"measure,omitempty"`
}

// capRelayResult is what a relay process measured, from "go" to the end of
// the measurement.
type capRelayResult struct {
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Settled    int64   `json:"settled"`
	Lost       int64   `json:"lost"`
	capCounts
	Turns int64 `json:"round_trips"`
	// PublishSeconds is the time spent in Publish, summed over batches.
	PublishSeconds float64 `json:"publish_seconds"`
	RSSKiB         int64   `json:"vm_hwm_kib"`
	Local          bool    `json:"pg_local"`
}

// capCounts are a store's claims and settlements.
type capCounts struct {
	// Claims counts claim statements (Claim, and the claim half of
	// SettleAndClaim); EmptyClaims those that found nothing.
	Claims      int64 `json:"claims"`
	EmptyClaims int64 `json:"empty_claims"`
	ClaimedRows int64 `json:"claimed_rows"`
	// Settles counts settlements (Settle, and the settle half of
	// SettleAndClaim); Pipelined the SettleAndClaim calls.
	Settles   int64 `json:"settles"`
	Pipelined int64 `json:"pipelined"`
	// DBSeconds is the time spent in the store's calls.
	DBSeconds float64 `json:"db_seconds"`
}

// capStore counts a store's claims and settlements; capSettleClaimer is
// the same over a core.SettleClaimer, so the relay still pipelines.
type capStore struct {
	core.Store
	claims, empty, rows, settles, pipes, nanos atomic.Int64
}

type capSettleClaimer struct {
	*capStore
	sc core.SettleClaimer
}

func countStore(inner core.Store) (core.Store, *capStore) {
	s := &capStore{Store: inner}
	if sc, ok := inner.(core.SettleClaimer); ok {
		return &capSettleClaimer{capStore: s, sc: sc}, s
	}
	return s, s
}

func (s *capStore) claimed(n int) {
	s.claims.Add(1)
	s.rows.Add(int64(n))
	if n == 0 {
		s.empty.Add(1)
	}
}

func (s *capStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	t := time.Now()
	b, err := s.Store.Claim(ctx, req)
	s.nanos.Add(int64(time.Since(t)))
	if err == nil {
		s.claimed(len(b.Events))
	}
	return b, err
}

func (s *capStore) Settle(ctx context.Context, req core.SettleRequest) error {
	t := time.Now()
	err := s.Store.Settle(ctx, req)
	s.nanos.Add(int64(time.Since(t)))
	s.settles.Add(1)
	return err
}

func (s *capStore) Listen(ctx context.Context, wake func()) error {
	if n, ok := s.Store.(core.Notifier); ok {
		return n.Listen(ctx, wake)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *capSettleClaimer) SettleAndClaim(ctx context.Context, sreq core.SettleRequest, creq core.ClaimRequest) (core.Batch, error, error) {
	t := time.Now()
	b, settleErr, claimErr := s.sc.SettleAndClaim(ctx, sreq, creq)
	s.nanos.Add(int64(time.Since(t)))
	s.settles.Add(1)
	s.pipes.Add(1)
	if claimErr == nil {
		s.claimed(len(b.Events))
	}
	return b, settleErr, claimErr
}

func (s *capStore) counts() capCounts {
	return capCounts{Claims: s.claims.Load(), EmptyClaims: s.empty.Load(), ClaimedRows: s.rows.Load(),
		Settles: s.settles.Load(), Pipelined: s.pipes.Load(), DBSeconds: float64(s.nanos.Load()) / 1e9}
}

func (c capCounts) minus(o capCounts) capCounts {
	return capCounts{Claims: c.Claims - o.Claims, EmptyClaims: c.EmptyClaims - o.EmptyClaims, ClaimedRows: c.ClaimedRows - o.ClaimedRows,
		Settles: c.Settles - o.Settles, Pipelined: c.Pipelined - o.Pipelined, DBSeconds: c.DBSeconds - o.DBSeconds}
}

// wakeupMode is a spec's store wake-up.
func wakeupMode(w string) postgres.WakeupMode {
	switch w {
	case "listen":
		return postgres.WakeupListen
	case "poll":
		return postgres.WakeupPoll
	}
	return postgres.WakeupAuto
}

// capPublisher makes the spec's transport; close releases it.
func capPublisher(spec *capRelaySpec) (core.Publisher, func(), error) {
	switch spec.Transport {
	case transportNoop, "":
		return &countSink{}, func() {}, nil
	case transportQStash:
		p, err := qstash.NewPublisher(&qstash.PublisherConfig{BaseURL: spec.QStashURL, Token: spec.QStashToken,
			Destination: qstash.Target{URL: spec.QStashDestination}, MaxBatchSize: spec.Batch})
		if err != nil {
			return nil, nil, err
		}
		return p, func() { _ = p.Close() }, nil
	case transportNATS:
		nc, err := nats.Connect(spec.NATSURL, nats.Name("outboxkit-bench capacity relay"))
		if err != nil {
			return nil, nil, fmt.Errorf("NATS at %s: %w", spec.NATSURL, err)
		}
		// As outboxctl relay --transport nats publishes: JetStream, the
		// event ID as Nats-Msg-Id, one acknowledged publish per event; the
		// stream exists already (no auto-provisioning, which would ask for
		// the stream's information before every publish).
		wp, err := wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
			Marshaler: &wmnats.NATSMarshaler{}, SubjectCalculator: wmnats.DefaultSubjectCalculator,
			JetStream: wmnats.JetStreamConfig{TrackMsgId: true},
		}, watermill.NopLogger{})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		subject := spec.NATSSubject
		p, err := outboxwatermill.NewPublisher(wp, &outboxwatermill.PublisherConfig{Topic: func(core.Event) string { return subject }})
		if err != nil {
			_ = wp.Close()
			return nil, nil, err
		}
		return p, func() { _ = wp.Close() }, nil
	case capKafka:
		// As outboxctl relay --transport kafka publishes: one record per
		// event, the idempotent producer, acks from all in-sync
		// replicas, every produce result awaited.
		cl, err := outboxkafka.NewClient(spec.KafkaSeeds)
		if err != nil {
			return nil, nil, err
		}
		topic := spec.KafkaTopic
		p, err := outboxkafka.NewPublisher(cl, &outboxkafka.PublisherConfig{Topic: func(core.Event) string { return topic }})
		if err != nil {
			cl.Close()
			return nil, nil, err
		}
		return p, cl.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown transport %q (known: %s, %s, %s, %s)", spec.Transport, transportNoop, transportQStash, transportNATS, capKafka)
}

// timedPublisher sums the time spent in Publish.
type timedPublisher struct {
	core.Publisher
	nanos atomic.Int64
}

func (p *timedPublisher) Publish(ctx context.Context, events []core.Event) error {
	t := time.Now()
	err := p.Publisher.Publish(ctx, events)
	p.nanos.Add(int64(time.Since(t)))
	return err
}

// runCapacityRelay is the -role capacity-relay process.
func runCapacityRelay(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	if !in.Scan() {
		return errors.New("no spec on stdin")
	}
	var spec capRelaySpec
	if err := json.Unmarshal(in.Bytes(), &spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	conc := spec.Concurrency
	if conc == 0 {
		conc = core.RelayConfig{}.WithDefaults().Concurrency
	}
	pool, err := newCapPool(ctx, spec.DSN, int32(conc)+1, spec.App)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(pool.Pool, &postgres.Config{Schema: spec.Schema, Wakeup: wakeupMode(spec.Wakeup)})
	if err != nil {
		return err
	}
	cs, counter := countStore(store)
	inner, closePub, err := capPublisher(&spec)
	if err != nil {
		return err
	}
	defer closePub()
	pub := &timedPublisher{Publisher: inner}
	want := spec.Events
	if want <= 0 {
		want = math.MaxInt64
	}
	ctr := newSettleCounter(int(min(want, math.MaxInt)))
	rcfg := &core.RelayConfig{BatchSize: spec.Batch, Concurrency: conc, Hooks: []core.RelayHook{ctr}}
	if spec.Wakeup == "" {
		rcfg.DisableNotifier, rcfg.PollInterval = true, 10*time.Millisecond
	}
	relay, err := core.NewRelay(cs, pub, rcfg)
	if err != nil {
		return err
	}
	say := func(s string) error {
		_, err := fmt.Fprintln(stdout, s)
		return err
	}
	if err := say("ready"); err != nil {
		return err
	}
	if !in.Scan() || in.Text() != "go" {
		return errors.New("parent did not say go")
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- relay.Run(rctx) }()
	if spec.Measure && (!in.Scan() || in.Text() != "measure") {
		return errors.New("parent did not say measure")
	}
	t0, cpu0, rtt0, c0 := time.Now(), cpuTime(), pool.rtt.turns.Load(), counter.counts()
	stopLine := make(chan struct{})
	go func() {
		for in.Scan() {
			if in.Text() == "stop" {
				break
			}
		}
		close(stopLine) // "stop", or the parent went away
	}()
	var waitErr error
	select {
	case <-ctr.done:
	case <-stopLine:
	case err := <-runErr:
		runErr <- err
		waitErr = fmt.Errorf("relay stopped: %v", err)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	res := capRelayResult{Seconds: time.Since(t0).Seconds(), CPUSeconds: (cpuTime() - cpu0).Seconds(),
		Settled: ctr.n.Load(), Lost: ctr.lost.Load(), capCounts: counter.counts().minus(c0),
		Turns: pool.rtt.turns.Load() - rtt0, PublishSeconds: float64(pub.nanos.Load()) / 1e9,
		RSSKiB: procField("/proc/self/status", "VmHWM"), Local: pool.local()}
	cancel()
	if err := <-runErr; err != nil && waitErr == nil && !errors.Is(err, context.Canceled) {
		waitErr = err
	}
	if waitErr != nil {
		return waitErr
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if err := say("done " + string(b)); err != nil {
		return err
	}
	// The parent reads its meters of this process's backends after
	// "done": they must still exist then, so the pool stays open until
	// the parent closes stdin (or says stop).
	select {
	case <-stopLine:
	case <-ctx.Done():
	}
	return nil
}

// capChild is the parent's handle on a relay process.
type capChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr strings.Builder
}

// startCapRelay starts a relay process with spec and waits for it to be
// ready.
func startCapRelay(ctx context.Context, spec capRelaySpec) (*capChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &capChild{lines: make(chan string, 16)}
	c.cmd = exec.CommandContext(ctx, exe, "-role", capacityRelayRole)
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	c.cmd.Stderr = &c.stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	b, err := json.Marshal(spec)
	if err == nil {
		_, err = fmt.Fprintf(c.stdin, "%s\n", b)
	}
	if err == nil {
		_, err = c.expect(ctx, "ready", 30*time.Second)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// expect waits for a line starting with prefix and returns its rest.
func (c *capChild) expect(ctx context.Context, prefix string, d time.Duration) (string, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				_ = c.cmd.Wait()
				return "", fmt.Errorf("relay process exited before %q: %s", prefix, strings.TrimSpace(c.stderr.String()))
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest, nil
			}
		case <-t.C:
			return "", fmt.Errorf("relay process: no %q after %s", prefix, d)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// result waits for the process's result (after "go", and "stop" when it
// measures until told).
func (c *capChild) result(ctx context.Context, d time.Duration) (capRelayResult, error) {
	line, err := c.expect(ctx, "done ", d)
	if err != nil {
		return capRelayResult{}, err
	}
	var r capRelayResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, fmt.Errorf("relay process result: %w", err)
	}
	return r, nil
}

func (c *capChild) say(s string) error {
	_, err := io.WriteString(c.stdin, s+"\n")
	return err
}

// close ends the process (closing its stdin stops its relay) and waits.
func (c *capChild) close() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() {
		for range c.lines {
		}
		_ = c.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}
