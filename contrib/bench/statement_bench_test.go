package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// BenchmarkStatementCPU splits the relay's database cost between its two
// statements: one relay loop (claim, then settle every event as published)
// runs its claims on one connection and its settlements on another, so
// each backend's CPU time (/proc/<pid>/stat) is one statement's cost; the
// ceiling statement runs alone for comparison. One op is one event; the
// figures are PostgreSQL CPU µs per event, which a busy machine barely
// moves.
//
// Batches of 1 and 10 show the fixed cost of a statement and its commit,
// which is what a relay woken for every event pays per event:
//
//	go test -run '^$' -bench 'StatementCPU/delete=false/batch=(1|10)$' -benchtime 5000x ./contrib/bench/
//	go test -run '^$' -bench StatementCPU -benchtime 100000x ./contrib/bench/
func BenchmarkStatementCPU(b *testing.B) {
	for _, del := range []bool{false, true} {
		for _, batch := range []int{1, 10, 100, 500} {
			b.Run(fmt.Sprintf("delete=%v/batch=%d", del, batch), func(b *testing.B) {
				statementCPU(b, batch, del)
			})
		}
	}
	for _, batch := range []int{1, 10, 100, 500} {
		b.Run(fmt.Sprintf("ceiling/batch=%d", batch), func(b *testing.B) {
			ceilingCPU(b, batch)
		})
	}
}

func benchSetup(b *testing.B) (context.Context, *options, *schema) {
	ctx := context.Background()
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	admin, err := newPool(ctx, o.dsn, 2)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(admin.Close)
	s, err := outboxSchema(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.drop() })
	if _, err := preloadOutbox(ctx, s, b.N); err != nil {
		b.Fatal(err)
	}
	return ctx, o, s
}

func statementCPU(b *testing.B, batch int, del bool) {
	ctx, o, s := benchSetup(b)
	claimPool, err := newPool(ctx, o.dsn, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer claimPool.Close()
	settlePool, err := newPool(ctx, o.dsn, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer settlePool.Close()
	cfg := postgres.Config{Schema: s.name, Notify: postgres.NotifyOff, DeletePublished: del}
	claimer, err := postgres.New(claimPool, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	settler, err := postgres.New(settlePool, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	claimCPU, err := newCPUMeter(ctx, claimPool)
	if err != nil {
		b.Fatal(err)
	}
	settleCPU, err := newCPUMeter(ctx, settlePool)
	if err != nil {
		b.Fatal(err)
	}
	var claimWall, settleWall time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		t0 := time.Now()
		bt, err := claimer.Claim(ctx, core.ClaimRequest{Limit: batch, LeaseFor: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if len(bt.Events) == 0 {
			b.Fatalf("claimed nothing after %d of %d", done, b.N)
		}
		t1 := time.Now()
		out := make([]core.Outcome, len(bt.Events))
		for i, e := range bt.Events {
			out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
		}
		if err := settler.Settle(ctx, core.SettleRequest{Lease: bt.Lease, Outcomes: out}); err != nil {
			b.Fatal(err)
		}
		claimWall += t1.Sub(t0)
		settleWall += time.Since(t1)
		done += len(bt.Events)
	}
	b.StopTimer()
	_, claimDB := claimCPU.stop()
	_, settleDB := settleCPU.stop()
	b.ReportMetric(perEvent(claimDB, b.N), "claim-pg-cpu-µs/event")
	b.ReportMetric(perEvent(settleDB, b.N), "settle-pg-cpu-µs/event")
	b.ReportMetric(float64(claimWall.Microseconds())/float64(b.N), "claim-wall-µs/event")
	b.ReportMetric(float64(settleWall.Microseconds())/float64(b.N), "settle-wall-µs/event")
}

func ceilingCPU(b *testing.B, batch int) {
	ctx, o, s := benchSetup(b)
	pool, err := newPool(ctx, o.dsn, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	meter, err := newCPUMeter(ctx, pool)
	if err != nil {
		b.Fatal(err)
	}
	sink := &countSink{}
	t0 := time.Now()
	b.ResetTimer()
	if err := ceilingWorker(ctx, pool, ceilingSQL(s), batch, sink); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	wall := time.Since(t0)
	_, db := meter.stop()
	if sink.n.Load() != int64(b.N) {
		b.Fatalf("ceiling marked %d of %d", sink.n.Load(), b.N)
	}
	b.ReportMetric(perEvent(db, b.N), "pg-cpu-µs/event")
	b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "wall-µs/event")
}
