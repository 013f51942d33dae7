package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// The consumer workload (BENCH.md workload 7): what a QStash consumer
// endpoint costs per delivery with the plain Deduper, with the Sequencer,
// and as an inbox receiver. Each system is a real qstash.Receiver served by
// net/http on 127.0.0.1, its handler writing one row into an effects table
// through the Deduper's transaction (postgres.Effect); the inbox receiver
// stores the delivery instead, and the inbox's workers apply the same
// effect through the inbox's default Deduper while the deliveries arrive.
// Deliveries are structured-mode CloudEvents POSTs signed the way QStash
// signs them (qstash.Signer with qstashdev's default key), all signed
// before the clock starts, sent over keep-alive connections: paced open
// loop at each -consumer-rates for -consumer-duration by -consumer-senders
// senders, then closed loop by -consumer-closed senders for the
// throughput at saturation.

// System names of the consumer workload.
const (
	sysPlainReceiver = "Receiver + Deduper"
	sysSeqReceiver   = "Receiver + Sequencer"
	sysInboxReceiver = "inbox receiver (workers running)"
)

// consumerKind is what stands behind the receiver.
type consumerKind int

const (
	consumerPlain consumerKind = iota
	consumerSequencer
	consumerInbox
)

var consumerSystems = []struct {
	sys  string
	kind consumerKind
}{
	{sysPlainReceiver, consumerPlain},
	{sysSeqReceiver, consumerSequencer},
	{sysInboxReceiver, consumerInbox},
}

const (
	// consumerAggregates is how many aggregates the events belong to;
	// delivery i is event i/consumerAggregates+1 of aggregate
	// i%consumerAggregates, so each aggregate's deliveries go out in
	// sequence order while up to the senders' number of aggregates are in
	// flight at once.
	consumerAggregates = 100
	// consumerPoolConns is each pool's size: pgxpool's default MaxConns on
	// a 2-core machine (max(4, NumCPU)), what a consumer that configures
	// nothing gets.
	consumerPoolConns = 4
	consumerPath      = "/qstash/orders"
	consumerName      = "bench"
	consumerEffects   = "consumer_effects"
)

// Metrics of the consumer workload.
const (
	mRecvCPU = "receiver PG CPU µs/delivery"
	mWorkCPU = "inbox workers PG CPU µs/delivery"
	mAllCPU  = "PG CPU µs/delivery (receiver + workers)"
	mGoCPU   = "Go CPU µs/delivery (senders, server, workers)"
)

func consumerRateCase(rate int) string { return fmt.Sprintf("%d deliveries/s", rate) }

func (b *bench) consumerClosedCase() string {
	return fmt.Sprintf("closed loop, %d senders", b.o.consumerClosed)
}

// consumerDeliveries is how many deliveries a paced run at rate sends.
func (o *options) consumerDeliveries(rate int) int {
	return int(float64(rate) * o.consumerFor.Seconds())
}

// consumerClosedDeliveries is how many deliveries the closed-loop run
// sends: as many as the fastest paced run.
func (o *options) consumerClosedDeliveries() int {
	return o.consumerDeliveries(slices.Max(o.consumerRates))
}

// consumerResult is one consumer trial.
type consumerResult struct {
	p50, p99, max time.Duration
	// rate is the deliveries/s sent (paced) or answered (closed loop).
	rate float64
	// applied is the inbox's deliveries/s from the first send until its
	// workers had applied the last (0 for the other systems).
	applied float64
	// CPU µs per delivery: the receiver's backends, the inbox workers'
	// (pool and wake-up connection), this process.
	recvCPU, workCPU, procCPU float64
	check                     Check
}

func (b *bench) runConsumer(ctx context.Context) error {
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("consumer workload: qstash.Receiver over net/http on 127.0.0.1, default ReceiverConfig but for keys, URL, Handler, Deduper, Consumer; "+
		"each handler writes one row through the Deduper's transaction; pools of %d connections; %d aggregates, deliveries in sequence order per aggregate; "+
		"structured-mode deliveries signed with qstash.Signer before the clock starts; latency is send → response of each POST on a keep-alive connection; "+
		"the inbox (postgres.Config and core.RelayConfig defaults) runs its workers on a pool of their own during the run, and the run waits until every event is applied; "+
		"one warm-up delivery per sender opens each trial, unmeasured", consumerPoolConns, consumerAggregates))
	type trial struct {
		cas        string
		rate, sndr int
	}
	var trials []trial
	for _, rate := range b.o.consumerRates {
		trials = append(trials, trial{consumerRateCase(rate), rate, b.o.consumerSenders})
	}
	trials = append(trials, trial{b.consumerClosedCase(), 0, b.o.consumerClosed})
	for rep := 0; rep < b.o.reps; rep++ {
		for _, t := range trials {
			for _, sy := range rotate(consumerSystems, rep) {
				prof := b.profilePath(rep, "consumer", t.cas, sy.sys)
				res, err := attempt(ctx, b, fmt.Sprintf("consumer %s %s rep %d", t.cas, sy.sys, rep+1), func() (consumerResult, error) {
					return b.consumerTrial(ctx, sy.kind, t.rate, t.sndr, prof)
				})
				if err != nil {
					return fmt.Errorf("%s %s: %w", sy.sys, t.cas, err)
				}
				b.logf("consumer %s %s rep %d: p50 %v p99 %v max %v, %.0f deliveries/s, receiver PG %.0f µs/delivery, workers PG %.0f µs/delivery",
					t.cas, sy.sys, rep+1, res.p50, res.p99, res.max, res.rate, res.recvCPU, res.workCPU)
				add := func(m string, v float64) { b.rep.add("consumer", t.cas, sy.sys, m, v) }
				add("p50 ms", ms(res.p50))
				add("p99 ms", ms(res.p99))
				add("max ms", ms(res.max))
				if t.rate > 0 {
					add("sent/s", res.rate)
					if res.rate < 0.95*float64(t.rate) {
						// Open loop: the senders fell behind, so the latency
						// is that of a saturated receiver, not of this rate.
						b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("consumer %s %s rep %d: only %.0f deliveries/s sent; the pace was not kept (the senders were all waiting for answers)",
							t.cas, sy.sys, rep+1, res.rate))
					}
				} else {
					add("deliveries/s", res.rate)
				}
				add(mRecvCPU, res.recvCPU)
				if sy.kind == consumerInbox {
					add(mWorkCPU, res.workCPU)
					add("applied/s", res.applied)
				}
				add(mAllCPU, res.recvCPU+res.workCPU)
				add(mGoCPU, res.procCPU)
				res.check.Workload, res.check.Case, res.check.System, res.check.Rep = "consumer", t.cas, sy.sys, rep+1
				b.rep.check(res.check)
			}
		}
	}
	return nil
}

// consumerRatios adds the sequencer's and the inbox's ratios to the plain
// receiver, each taken per repetition within one run.
func (b *bench) consumerRatios() {
	r := b.rep
	cases := []string{b.consumerClosedCase()}
	for _, rate := range b.o.consumerRates {
		cases = append(cases, consumerRateCase(rate))
	}
	for _, cas := range cases {
		metrics := []string{"p50 ms", "p99 ms", mRecvCPU, mAllCPU}
		if cas == b.consumerClosedCase() {
			metrics = append(metrics, "deliveries/s")
		}
		for _, m := range metrics {
			r.ratio("consumer", cas, "sequencer / plain deduper, "+m, m, sysSeqReceiver, sysPlainReceiver)
			r.ratio("consumer", cas, "inbox / plain deduper, "+m, m, sysInboxReceiver, sysPlainReceiver)
		}
	}
}

// delivery is one signed QStash delivery.
type delivery struct {
	body  []byte
	token string
	msgID string
}

// consumerEvents returns n events over consumerAggregates aggregates, each
// aggregate's in sequence order, and their deliveries to url, signed.
func consumerEvents(n int, url string) ([]core.Event, []delivery, error) {
	signer := qstash.Signer{Key: qstashdev.DefaultCurrentSigningKey}
	now := time.Now().UTC()
	events := make([]core.Event, n)
	ds := make([]delivery, n)
	for i := range events {
		e := core.Event{
			ID: core.NewID(), Type: "order.confirmed", Source: "bench", CreatedAt: now,
			AggregateType: "order", AggregateID: "order-" + strconv.Itoa(i%consumerAggregates), Sequence: int64(i/consumerAggregates) + 1,
			Payload: []byte(benchPayload),
		}
		body, err := qstash.EncodeStructuredEvent(e)
		if err != nil {
			return nil, nil, err
		}
		tok, err := signer.Sign(body, url)
		if err != nil {
			return nil, nil, err
		}
		events[i], ds[i] = e, delivery{body: body, token: tok, msgID: "msg_bench_" + strconv.Itoa(i)}
	}
	return events, ds, nil
}

// sendAll calls fn(i) for i in [0, n) from workers goroutines, each
// taking the next i as soon as its previous call returned. It returns when
// every call has returned, or at the first error.
func sendAll(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	var next atomic.Int64
	var errs onceErr
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || errs.get() != nil || ctx.Err() != nil {
					return
				}
				errs.set(fn(ctx, i))
			}
		})
	}
	wg.Wait()
	if err := errs.get(); err != nil {
		return err
	}
	return ctx.Err()
}

// consumerTrial runs one system at rate deliveries/s (open loop), or closed
// loop when rate is 0, with senders concurrent senders.
func (b *bench) consumerTrial(ctx context.Context, kind consumerKind, rate, senders int, profile string) (consumerResult, error) {
	n := b.o.consumerClosedDeliveries()
	if rate > 0 {
		n = b.o.consumerDeliveries(rate)
	}
	warm := senders
	total := warm + n
	s, err := b.createSchema(ctx)
	if err != nil {
		return consumerResult{}, err
	}
	defer s.drop()
	table := postgres.DefaultTable
	if kind == consumerInbox {
		table = consumerName + "_inbox" // InboxConfig's default for Consumer
	}
	if err := postgres.Migrate(ctx, b.admin, &postgres.MigrateConfig{Schema: s.name, Table: table}); err != nil {
		return consumerResult{}, fmt.Errorf("migrate %s: %w", s.name, err)
	}
	if _, err := b.admin.Exec(ctx, `CREATE TABLE `+s.table(consumerEffects)+` (
	n bigserial PRIMARY KEY, event_id uuid NOT NULL, aggregate_id text NOT NULL, sequence bigint NOT NULL)`); err != nil {
		return consumerResult{}, fmt.Errorf("create the effects table: %w", err)
	}
	insert := `INSERT INTO ` + s.table(consumerEffects) + ` (event_id, aggregate_id, sequence) VALUES ($1, $2, $3)`
	effect := postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
		_, err := tx.Exec(ctx, insert, pgtype.UUID{Bytes: e.ID, Valid: true}, e.AggregateID, e.Sequence)
		return err
	})

	recvPool, err := newPool(ctx, b.o.dsn, consumerPoolConns)
	if err != nil {
		return consumerResult{}, err
	}
	defer recvPool.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return consumerResult{}, err
	}
	defer ln.Close()
	url := "http://" + ln.Addr().String() + consumerPath
	cfg := qstash.ReceiverConfig{CurrentSigningKey: qstashdev.DefaultCurrentSigningKey, NextSigningKey: qstashdev.DefaultNextSigningKey, URL: url}

	var rc *qstash.Receiver
	var applied *settleCounter // the inbox workers' applied events
	var app string             // the inbox workers' application_name
	switch kind {
	case consumerPlain, consumerSequencer:
		var d core.Deduper
		if kind == consumerPlain {
			d, err = postgres.NewDeduper(recvPool, &postgres.DeduperConfig{Schema: s.name})
		} else {
			d, err = postgres.NewSequencer(recvPool, &postgres.SequencerConfig{Schema: s.name})
		}
		if err != nil {
			return consumerResult{}, err
		}
		cfg.Handler, cfg.Deduper, cfg.Consumer = effect, d, consumerName
		if rc, err = qstash.NewReceiver(&cfg); err != nil {
			return consumerResult{}, err
		}
	case consumerInbox:
		// The receiving side and the workers are two Inboxes on one table,
		// each on a pool of its own, as in two processes, so that the
		// receiver's backends and the workers' are measured apart.
		recvInbox, err := postgres.NewInbox(recvPool, &postgres.InboxConfig{Consumer: consumerName, Store: postgres.Config{Schema: s.name}})
		if err != nil {
			return consumerResult{}, err
		}
		if rc, err = qstash.NewInboxReceiver(recvInbox, &cfg); err != nil {
			return consumerResult{}, err
		}
		// The wake-up connection is opened with the pool's settings, so
		// it carries the same application_name.
		app = "outboxkit-bench-inbox-" + s.name
		workPool, err := newPool(ctx, b.o.dsn, consumerPoolConns, "application_name", app)
		if err != nil {
			return consumerResult{}, err
		}
		defer workPool.Close()
		applied = newSettleCounter(total)
		worker, err := postgres.NewInbox(workPool, &postgres.InboxConfig{
			Consumer: consumerName, Store: postgres.Config{Schema: s.name}, Handler: effect,
			Relay: core.RelayConfig{Hooks: []core.RelayHook{applied}},
		})
		if err != nil {
			return consumerResult{}, err
		}
		acq0 := workPool.Stat().AcquireCount()
		wctx, cancel := context.WithCancel(ctx)
		runErr := make(chan error, 1)
		go func() { runErr <- worker.Run(wctx) }()
		defer func() { cancel(); <-runErr }() // before workPool closes
		if _, err := waitIdleReady(ctx, b.admin, workPool, acq0, app, postgres.WakeupAuto, runErr); err != nil {
			return consumerResult{}, fmt.Errorf("inbox workers: %w", err)
		}
	}

	mux := http.NewServeMux()
	mux.Handle(consumerPath, rc)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: senders, MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	events, ds, err := consumerEvents(total, url)
	if err != nil {
		return consumerResult{}, err
	}
	lat := make([]time.Duration, total)
	var non200 atomic.Int64
	var firstBad atomic.Int32
	send := func(ctx context.Context, i int) error {
		d := &ds[i]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.body))
		if err != nil {
			return err
		}
		h := req.Header
		h.Set("Content-Type", qstash.ContentTypeStructured)
		h.Set("Upstash-Signature", d.token)
		h.Set("Upstash-Message-Id", d.msgID)
		h.Set("Upstash-Retried", "0")
		h.Set("User-Agent", "Upstash-QStash")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		lat[i] = time.Since(t0)
		if resp.StatusCode != http.StatusOK {
			non200.Add(1)
			firstBad.CompareAndSwap(0, int32(resp.StatusCode))
		}
		return nil
	}
	// One delivery per sender opens the keep-alive connections and the
	// pools' prepared statements before anything is measured.
	if err := sendAll(ctx, warm, senders, send); err != nil {
		return consumerResult{}, fmt.Errorf("warm-up: %w", err)
	}
	if applied != nil {
		if err := waitCount(ctx, &applied.n, int64(warm), 30*time.Second); err != nil {
			return consumerResult{}, fmt.Errorf("inbox workers applying the warm-up: %w", err)
		}
	}

	meter, err := newCPUMeter(ctx, recvPool)
	if err != nil {
		return consumerResult{}, err
	}
	var workMeter *cpuMeter
	if applied != nil {
		if workMeter, err = newAppCPUMeter(ctx, b.admin, app); err != nil {
			return consumerResult{}, err
		}
	}
	stopProf := startProfile(profile)
	measured := func(ctx context.Context, i int) error { return send(ctx, warm+i) }
	start := time.Now()
	var res consumerResult
	if rate > 0 {
		res.rate, err = pace(ctx, n, rate, senders, measured)
	} else {
		err = sendAll(ctx, n, senders, measured)
		res.rate = float64(n) / time.Since(start).Seconds()
	}
	procCPU, recvCPU := meter.stop()
	var workCPU time.Duration
	if err == nil && applied != nil {
		select {
		case <-applied.done:
			res.applied = float64(n) / time.Since(start).Seconds()
		case <-time.After(drainTimeout(n)):
			err = fmt.Errorf("inbox workers applied %d of %d events", applied.n.Load(), total)
		case <-ctx.Done():
			err = ctx.Err()
		}
		var workProc time.Duration
		workProc, workCPU = workMeter.stop()
		procCPU = max(procCPU, workProc) // the process's CPU until the last event was applied
	}
	stopProf()
	if err != nil {
		return consumerResult{}, err
	}
	res.recvCPU, res.workCPU, res.procCPU = perEvent(recvCPU, n), perEvent(workCPU, n), perEvent(procCPU, n)
	m := slices.Clone(lat[warm:])
	slices.Sort(m)
	res.p50, res.p99, res.max = m[len(m)*50/100], m[min(len(m)-1, len(m)*99/100)], m[len(m)-1]
	res.check, err = b.consumerCheck(ctx, s, kind, table, events, non200.Load(), int(firstBad.Load()))
	return res, err
}

// consumerCheck checks that every event was applied exactly once (one
// effects row each), every delivery was answered 200, the Sequencer's
// effects are in sequence order per aggregate, and the inbox holds no
// event it has not applied.
func (b *bench) consumerCheck(ctx context.Context, s *schema, kind consumerKind, table string, events []core.Event, non200 int64, firstBad int) (Check, error) {
	var rows, matched int64
	err := b.admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s.table(consumerEffects)+`),
	(SELECT count(DISTINCT e.event_id) FROM `+s.table(consumerEffects)+` e JOIN unnest($1::uuid[]) AS u(id) ON u.id = e.event_id)`,
		eventUUIDs(events)).Scan(&rows, &matched)
	if err != nil {
		return Check{}, fmt.Errorf("count effects: %w", err)
	}
	want := int64(len(events))
	ok := rows == want && matched == want && non200 == 0
	detail := fmt.Sprintf("%d effects rows for %d events, %d of the events among them; %d answers not 200", rows, want, matched, non200)
	if non200 > 0 {
		detail += fmt.Sprintf(" (the first: %d)", firstBad)
	}
	switch kind {
	case consumerSequencer:
		var outOfOrder int64
		if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM (
	SELECT sequence, row_number() OVER (PARTITION BY aggregate_id ORDER BY n) AS rn FROM `+s.table(consumerEffects)+`) x WHERE sequence <> rn`).Scan(&outOfOrder); err != nil {
			return Check{}, fmt.Errorf("effects order: %w", err)
		}
		ok = ok && outOfOrder == 0
		detail += fmt.Sprintf("; %d effects out of sequence order within their aggregate", outOfOrder)
	case consumerInbox:
		var inbox, pending, dead int64
		if err := b.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NULL), count(*) FILTER (WHERE dead_at IS NOT NULL) FROM `+s.table(table)).
			Scan(&inbox, &pending, &dead); err != nil {
			return Check{}, fmt.Errorf("inbox rows: %w", err)
		}
		ok = ok && inbox == want && pending == 0 && dead == 0
		detail += fmt.Sprintf("; inbox: %d rows, %d not applied, %d dead-lettered", inbox, pending, dead)
	}
	return Check{OK: ok, Detail: detail}, nil
}

func eventUUIDs(events []core.Event) []pgtype.UUID {
	ids := make([]pgtype.UUID, len(events))
	for i, e := range events {
		ids[i] = pgtype.UUID{Bytes: e.ID, Valid: true}
	}
	return ids
}

// waitCount waits until c reaches want, polling, for at most d.
func waitCount(ctx context.Context, c *atomic.Int64, want int64, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d after %s", c.Load(), want, d)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
