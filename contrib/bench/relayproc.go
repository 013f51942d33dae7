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
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// childEnv marks a process started by the scale-out workload, so a test
// binary (whose main is the test runner) knows to act as a relay process.
const childEnv = "OUTBOXKIT_BENCH_CHILD"

// recordSize is one publish record: the event ID, then the lease token it
// was claimed under.
const recordSize = 32

// relayReport is what a relay process prints when it stops.
type relayReport struct {
	Published  int64   `json:"published"`
	Settled    int64   `json:"settled"`
	Lost       int64   `json:"lost"`
	NoLease    int64   `json:"no_lease"`
	HWMKiB     int64   `json:"vm_hwm_kib"`
	RSSKiB     int64   `json:"vm_rss_kib"`
	CPUSeconds float64 `json:"cpu_seconds"`
	DBSeconds  float64 `json:"db_cpu_seconds"`
	ClaimMs    float64 `json:"claim_ms"`
	SettleMs   float64 `json:"settle_ms"`
	PipeMs     float64 `json:"settle_claim_ms"`
}

// runRelayProcess is the -role relay process of the scale-out workload: one
// core.Relay over postgres.Store, publishing to a sink that records, for
// every event, the lease token it was claimed under. The protocol with the
// parent, one line each way:
//
//	child: "ready"            parent: "go"
//	child: "n <settled>"      after every settled batch
//	                          parent: "stop" (or closes stdin)
//	child: "done <json>"      relayReport, then exits
func runRelayProcess(ctx context.Context, o *options, stdin io.Reader, stdout io.Writer) error {
	if o.schema == "" || o.record == "" {
		return errors.New("-role relay needs -schema and -record")
	}
	conc := o.childConc
	if conc == 0 {
		conc = core.RelayConfig{}.WithDefaults().Concurrency
	}
	pool, err := newPool(ctx, o.dsn, int32(conc)+1)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Schema: o.schema, Notify: postgres.NotifyOff})
	if err != nil {
		return err
	}
	leases := &leaseMap{m: make(map[core.ID]core.ID)}
	ist, stats := instrument(store, leases)

	f, err := os.Create(o.record)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := bufio.NewWriterSize(f, 64<<10)
	var (
		recMu     sync.Mutex
		published int64
		noLease   int64
	)
	pub := core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		recMu.Lock()
		defer recMu.Unlock()
		var buf [recordSize]byte
		for i := range events {
			tok := leases.take(events[i].ID)
			if tok.IsZero() {
				noLease++
			}
			copy(buf[:16], events[i].ID[:])
			copy(buf[16:], tok[:])
			if _, err := rec.Write(buf[:]); err != nil {
				return err
			}
		}
		published += int64(len(events))
		return nil
	})

	out := bufio.NewWriter(stdout)
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		outMu.Unlock()
	}
	ctr := newSettleCounter(math.MaxInt)
	ctr.onSettle = func(n int64) { say("n %d", n) }
	relay, err := core.NewRelay(ist, pub, &core.RelayConfig{
		BatchSize: o.procBatch, Concurrency: conc, DisableNotifier: true,
		PollInterval: 10 * time.Millisecond, Hooks: []core.RelayHook{ctr},
	})
	if err != nil {
		return err
	}

	in := bufio.NewScanner(stdin)
	say("ready")
	if !in.Scan() || in.Text() != "go" {
		return errors.New("parent did not say go")
	}
	meter, err := newCPUMeter(ctx, pool)
	if err != nil {
		return err
	}
	stopProf := startProfile(o.cpuprof)
	rctx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- relay.Run(rctx) }()
	for in.Scan() {
		if in.Text() == "stop" {
			break
		}
	}
	cancel()
	err = <-runErr
	cpu, dbCPU := meter.stop()
	stopProf()
	if err != nil {
		return err
	}
	recMu.Lock()
	ferr := rec.Flush()
	recMu.Unlock()
	if ferr != nil {
		return ferr
	}
	rep := relayReport{
		Published: published, Settled: ctr.n.Load(), Lost: ctr.lost.Load(), NoLease: noLease,
		HWMKiB: procField("/proc/self/status", "VmHWM"), RSSKiB: procField("/proc/self/status", "VmRSS"),
		CPUSeconds: cpu.Seconds(), DBSeconds: dbCPU.Seconds(), ClaimMs: stats.claim.meanMillis(), SettleMs: stats.settle.meanMillis(), PipeMs: stats.settleClaim.meanMillis(),
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	say("done %s", b)
	return nil
}
