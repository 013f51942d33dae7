package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The saturation run is the model's check (docs/SCALING.md, validation):
// writers commit business transactions with an event each as fast as they
// can while one relay with its defaults relays them, everything on the
// same cores (PostgreSQL and this process pinned with taskset), and the
// events/s the cores sustained is compared with what the model predicts
// from per-event costs measured apart, on another number of cores.

// CapSaturation is one saturation run.
type CapSaturation struct {
	Seconds float64 `json:"seconds"`
	Writers int     `json:"writers"`
	// CPUs this process may run on; PostgreSQL must be pinned to the same
	// ones for the run to mean what it says.
	CPUs    []int   `json:"cpus"`
	Written float64 `json:"written_per_s"`
	Relayed float64 `json:"relayed_per_s"`
	// Sustained is the lower of the two: what the cores kept up with.
	Sustained float64 `json:"sustained_per_s"`
	// CPU per event, µs: PostgreSQL's backends (writers' and relay's), its
	// background processes, this process (writers' client and relay).
	PGPerEv         float64 `json:"pg_cpu_us_per_event"`
	BackgroundPerEv float64 `json:"background_cpu_us_per_event"`
	GoPerEv         float64 `json:"go_cpu_us_per_event"`
	EventsPerClaim  float64 `json:"events_per_claim"`
	// Obtained is the CPU the measured processes got, in cores; Busy the
	// CPUs' busy time (everyone's) in cores, from /proc/stat.
	Obtained float64 `json:"obtained_cores"`
	Busy     float64 `json:"busy_cores"`
	Load     string  `json:"load"`
	Rep      int     `json:"rep"`
}

func (c *capRun) measureSaturation(ctx context.Context, rep int) (CapSaturation, error) {
	s, err := c.capSchema(ctx, c.capHistory())
	if err != nil {
		return CapSaturation{}, err
	}
	defer s.drop()
	if _, err := c.admin.Exec(ctx, `CREATE TABLE `+s.table("accounts")+` (id integer PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO `+s.table("accounts")+` (id) SELECT generate_series(1, `+strconv.Itoa(accountRows)+`)`); err != nil {
		return CapSaturation{}, fmt.Errorf("business table: %w", err)
	}
	if _, err := c.admin.Exec(ctx, `VACUUM ANALYZE `+s.table("accounts")); err != nil {
		return CapSaturation{}, fmt.Errorf("business table: %w", err)
	}
	writerApp, relayApp := appName("writer", s), appName("relay", s)
	wpool, err := newCapPool(ctx, c.o.dsn, int32(c.o.satWriters), writerApp)
	if err != nil {
		return CapSaturation{}, err
	}
	defer wpool.Close()
	rpool, err := newCapPool(ctx, c.o.dsn, 3, relayApp)
	if err != nil {
		return CapSaturation{}, err
	}
	defer rpool.Close()
	wstore, err := postgres.New(wpool.Pool, &postgres.Config{Schema: s.name})
	if err != nil {
		return CapSaturation{}, err
	}
	rstore, err := postgres.New(rpool.Pool, &postgres.Config{Schema: s.name})
	if err != nil {
		return CapSaturation{}, err
	}
	cs, counter := countStore(rstore)
	ctr := newSettleCounter(int(^uint(0) >> 1))
	relay, err := core.NewRelay(cs, &countSink{}, &core.RelayConfig{Hooks: []core.RelayHook{ctr}})
	if err != nil {
		return CapSaturation{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- relay.Run(rctx) }()
	stopRelay := func() error {
		cancel()
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	want := wakeupWAL
	if !c.walStream {
		want = wakeupListen
	}
	deadline := time.Now().Add(idleReadyTimeout)
	for {
		w, _, err := wakeupOf(ctx, c.admin, relayApp)
		if err != nil {
			_ = stopRelay()
			return CapSaturation{}, err
		}
		if w == want {
			break
		}
		if time.Now().After(deadline) {
			_ = stopRelay()
			return CapSaturation{}, fmt.Errorf("the relay's wake-up connection is %s after %s", w, idleReadyTimeout)
		}
		time.Sleep(20 * time.Millisecond) // polling pg_stat_activity
	}
	update := `UPDATE ` + s.table("accounts") + ` SET balance = balance + 1 WHERE id = $1`
	payload := []byte(benchPayload)
	var written atomic.Int64
	tx1 := func(ctx context.Context, rng *rand.Rand) error {
		tx, err := wpool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, update, rng.IntN(accountRows)+1); err != nil {
			return err
		}
		if err := wstore.Add(ctx, tx, core.Event{ID: core.NewID(), Type: "bench", Payload: payload}); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		written.Add(1)
		return nil
	}
	// A second of writes first, so the relay's pacing has found the rate.
	if _, err := closedLoop(ctx, c.o.satWriters, time.Second, tx1); err != nil {
		_ = stopRelay()
		return CapSaturation{}, err
	}
	cpus := allowedCPUs()
	load := loadSnapshot()
	wmeter, err := newBackendMeter(ctx, c.admin, writerApp)
	if err != nil {
		_ = stopRelay()
		return CapSaturation{}, err
	}
	rmeter, err := newBackendMeter(ctx, c.admin, relayApp)
	if err != nil {
		_ = stopRelay()
		return CapSaturation{}, err
	}
	server := newServerCPU(ctx, c.admin)
	st0, stOK := readCPUStat(cpus)
	w0, r0, k0, cpu0, start := written.Load(), ctr.n.Load(), counter.counts(), cpuTime(), time.Now()
	_, err = closedLoop(ctx, c.o.satWriters, c.o.saturate, tx1)
	elapsed := time.Since(start)
	w1, r1, k1, goCPU := written.Load(), ctr.n.Load(), counter.counts(), cpuTime()-cpu0
	st1, _ := readCPUStat(cpus)
	wpg, _ := wmeter.stop(ctx)
	rpg, _ := rmeter.stop(ctx)
	srv := server.stop(ctx)
	if serr := stopRelay(); err == nil {
		err = serr
	}
	if err != nil {
		return CapSaturation{}, err
	}
	sec := elapsed.Seconds()
	res := CapSaturation{Seconds: sec, Writers: c.o.satWriters, CPUs: cpus, Written: float64(w1-w0) / sec, Relayed: float64(r1-r0) / sec, Load: load, Rep: rep + 1}
	res.Sustained = min(res.Written, res.Relayed)
	n := float64(w1 - w0)
	if n == 0 {
		return res, errors.New("no event written")
	}
	pg := wpg + rpg
	res.PGPerEv, res.GoPerEv = us(pg)/n, us(goCPU)/n
	if srv.ok {
		res.BackgroundPerEv = us(srv.background) / n
	}
	if k := k1.minus(k0); k.Claims-k.EmptyClaims > 0 {
		res.EventsPerClaim = float64(k.ClaimedRows) / float64(k.Claims-k.EmptyClaims)
	}
	res.Obtained = (pg + srv.background + goCPU).Seconds() / sec
	if stOK && st1.total > st0.total {
		// /proc/stat counts in USER_HZ ticks over every CPU of the set.
		res.Busy = float64(st1.busy-st0.busy) / clockTick / sec
	}
	return res, nil
}
