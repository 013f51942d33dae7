package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// latencyResult is one paced run: commit → sink latencies.
type latencyResult struct {
	p50, p99, max time.Duration
	achieved      float64 // events committed per second
	relayDBCPU    float64 // µs per event of the relay's PostgreSQL backends
	check         Check
}

// latencyVariant is how outboxkit runs in a latency measurement.
type latencyVariant struct {
	mode postgres.NotifyMode
	// defaults runs the store and the relay with their defaults (mode
	// is then ignored): what a user who configures nothing gets.
	defaults bool
	// async runs the relay's connections with synchronous_commit=off (a
	// proposal, see proposal.go).
	async bool
	// reclaim (a proposal for core) claims again at once after any
	// non-empty batch, instead of waiting for the poll interval after a
	// batch that was not full.
	reclaim bool
	// on, when set, is the migrated schema to run in (kept afterwards);
	// otherwise each run gets a fresh one (partitions.go sets it).
	on *schema
}

// pace calls fn(i) for i in [0, n) at rate per second from workers
// goroutines, open loop: event i is handed out at start + i/rate whether or
// not earlier ones are done, so a slow database shows up as latency rather
// than as a lower rate. It returns when every call has returned, with the
// rate achieved.
func pace(ctx context.Context, n, rate, workers int, fn func(ctx context.Context, i int) error) (float64, error) {
	jobs := make(chan int, n)
	var errs onceErr
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if errs.get() != nil || ctx.Err() != nil {
					continue
				}
				errs.set(fn(ctx, i))
			}
		}()
	}
	start := time.Now()
	period := time.Second / time.Duration(rate)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if d := time.Until(start.Add(time.Duration(i) * period)); d > 0 {
			time.Sleep(d) // pacing, not synchronisation
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	if err := errs.get(); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), ctx.Err()
}

// summarize turns the arrivals of one run into a latencyResult.
func summarize(a *arrivals, n int, achieved float64) latencyResult {
	lat, early := a.latencies()
	slices.Sort(lat)
	res := latencyResult{achieved: achieved}
	if len(lat) > 0 {
		res.p50 = lat[len(lat)*50/100]
		res.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
		res.max = lat[len(lat)-1]
	}
	res.check = Check{OK: len(lat) == n,
		Detail: fmt.Sprintf("%d of %d events arrived; %d duplicate arrivals; %d arrived before their producer saw COMMIT return (counted as 0)", len(lat), n, a.dups.Load(), early)}
	return res
}

// latencyIDs makes n event IDs and their arrival tracker.
func latencyIDs(n int) ([]core.ID, *arrivals) {
	ids := make([]core.ID, n)
	for i := range ids {
		ids[i] = core.NewID()
	}
	return ids, newArrivals(ids)
}

// latencyOutboxkit writes rate events per second, each in its own
// transaction through postgres.Store.Add, while core.Relay (batch 100,
// Concurrency 2) relays them to the sink. With NOTIFY the relay keeps its
// default 1 s poll, so the figure is the notification path's; without, it
// polls every 10 ms, like Watermill here.
//
// With postgres.NotifyAfterCommit the producers call Store.Notify after
// each COMMIT: the store's coalesced wake-up. With defaults, the store and
// the relay run with their zero configurations (batch 100, 1 s poll,
// whatever wake-up the store defaults to).
func (b *bench) latencyOutboxkit(ctx context.Context, rate int, v latencyVariant, profile string) (latencyResult, error) {
	mode := v.mode
	if v.defaults {
		mode = postgres.Config{}.WithDefaults().Notify
	}
	notify := mode != postgres.NotifyOff
	n := rate * int(b.o.latencyFor/time.Second)
	s := v.on
	if s == nil {
		var err error
		if s, err = b.outboxSchema(ctx); err != nil {
			return latencyResult{}, err
		}
		defer s.drop()
	}
	ids, arr := latencyIDs(n)
	payload := []byte(benchPayload)

	var params []string
	if v.async {
		params = asyncCommit()
	}
	relayPool, err := newPool(ctx, b.o.dsn, 3, params...)
	if err != nil {
		return latencyResult{}, err
	}
	defer relayPool.Close()
	prodPool, err := newPool(ctx, b.o.dsn, int32(b.o.writers))
	if err != nil {
		return latencyResult{}, err
	}
	defer prodPool.Close()
	cfg := postgres.Config{Schema: s.name, Notify: mode}
	if v.defaults {
		cfg = postgres.Config{Schema: s.name}
	}
	relayStore, err := postgres.New(relayPool, &cfg)
	if err != nil {
		return latencyResult{}, err
	}
	prodStore, err := postgres.New(prodPool, &cfg)
	if err != nil {
		return latencyResult{}, err
	}
	listening := make(chan struct{})
	var once sync.Once
	store := &notifyWatch{Store: relayStore, listening: func() { once.Do(func() { close(listening) }) }, reclaim: v.reclaim}
	poll := time.Duration(0) // the default, 1s
	if !notify {
		poll = 10 * time.Millisecond
		once.Do(func() { close(listening) })
	}
	rcfg := &core.RelayConfig{BatchSize: 100, DisableNotifier: !notify, PollInterval: poll}
	if v.defaults {
		rcfg = &core.RelayConfig{}
	}
	relay, err := core.NewRelay(store, &countSink{arrivals: arr}, rcfg)
	if err != nil {
		return latencyResult{}, err
	}
	store.wake = relay.Wake
	meter, err := newCPUMeter(ctx, relayPool)
	if err != nil {
		return latencyResult{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- relay.Run(rctx) }()
	// Writes made before LISTEN took effect would wait for the poll.
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		return latencyResult{}, fmt.Errorf("relay listener did not start")
	}

	stopProf := startProfile(profile)
	achieved, err := pace(ctx, n, rate, b.o.writers, func(ctx context.Context, i int) error {
		e := core.Event{ID: ids[i], Type: "bench", Payload: payload}
		tx, err := prodPool.Begin(ctx)
		if err != nil {
			return err
		}
		if err := prodStore.Add(ctx, tx, e); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		arr.committed(i)
		prodStore.Notify() // a no-op unless NotifyAfterCommit
		return nil
	})
	if err == nil {
		select {
		case <-arr.all:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	_, dbCPU := meter.stop()
	stopProf()
	cancel()
	<-runErr
	if err != nil {
		return latencyResult{}, err
	}
	res := summarize(arr, n, achieved)
	res.relayDBCPU = perEvent(dbCPU, n)
	return res, nil
}

// notifyWatch is a store whose Listen reports when the listener is
// connected (its first wake-up). With reclaim, a claim that returned events
// wakes the relay, so it claims again at once: the prototype of claiming
// until a claim comes back empty.
type notifyWatch struct {
	*postgres.Store
	listening func()
	reclaim   bool
	wake      func()
}

func (s *notifyWatch) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	b, err := s.Store.Claim(ctx, req)
	if s.reclaim && len(b.Events) > 0 {
		s.wake()
	}
	return b, err
}

func (s *notifyWatch) SettleAndClaim(ctx context.Context, sreq core.SettleRequest, creq core.ClaimRequest) (core.Batch, error, error) {
	b, settleErr, claimErr := s.Store.SettleAndClaim(ctx, sreq, creq)
	if s.reclaim && len(b.Events) > 0 {
		s.wake()
	}
	return b, settleErr, claimErr
}

func (s *notifyWatch) Listen(ctx context.Context, wake func()) error {
	return s.Store.Listen(ctx, func() {
		s.listening()
		wake()
	})
}

// latencyWatermill is latencyOutboxkit for Watermill's forwarder: each
// message is published through forwarder.Publisher over watermill-sql's
// publisher in its own transaction; the forwarder (batch 100, 10 ms poll)
// moves it to the sink.
func (b *bench) latencyWatermill(ctx context.Context, rate int, profile string) (latencyResult, error) {
	n := rate * int(b.o.latencyFor/time.Second)
	s, err := b.createSchema(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	defer s.drop()
	ids, arr := latencyIDs(n)
	payload := []byte(benchPayload)
	fwdPool, err := newPool(ctx, b.o.dsn, 2)
	if err != nil {
		return latencyResult{}, err
	}
	defer fwdPool.Close()
	prodPool, err := newPool(ctx, b.o.dsn, int32(b.o.writers))
	if err != nil {
		return latencyResult{}, err
	}
	defer prodPool.Close()
	const batch = 100
	fwd, err := watermillForwarder(ctx, s, fwdPool, batch, &wmSink{arrivals: arr})
	if err != nil {
		return latencyResult{}, err
	}
	schemaAdapter, _ := watermillAdapters(s, batch)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- fwd.Run(rctx) }()
	select {
	case <-fwd.Running():
	case <-time.After(10 * time.Second):
		return latencyResult{}, fmt.Errorf("watermill forwarder did not start")
	}

	stopProf := startProfile(profile)
	logger := watermill.NopLogger{}
	achieved, err := pace(ctx, n, rate, b.o.writers, func(ctx context.Context, i int) error {
		tx, err := prodPool.Begin(ctx)
		if err != nil {
			return err
		}
		pub, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: schemaAdapter}, logger)
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		msg := message.NewMessage(ids[i].String(), payload)
		msg.SetContext(ctx)
		if err := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: watermillTopic}).Publish(watermillSink, msg); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		arr.committed(i)
		return nil
	})
	if err == nil {
		select {
		case <-arr.all:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	stopProf()
	_ = fwd.Close()
	cancel()
	<-runErr
	if err != nil {
		return latencyResult{}, err
	}
	return summarize(arr, n, achieved), nil
}
