package main

import (
	"context"
	"fmt"
	"io"
	"testing"
)

// BenchmarkDrain is the drain workload as a Go benchmark, for quick
// comparisons with -count and benchstat; one op is one event. postgres'
// BenchmarkClaimSettle and BenchmarkSQLCeiling measure the store's
// statements alone; this measures whole systems (core.Relay over the store,
// Watermill's forwarder, the ceiling) into the counting sink, preloaded by
// COPY. ns/op is replaced by the drain's own time (the preload excluded);
// the CPU figures are per event on each side.
//
//	go test -run '^$' -bench Drain -benchtime 50000x -count 3 ./contrib/bench/
func BenchmarkDrain(b *testing.B) {
	for _, sys := range []string{sysOutboxkit, sysDelete, sysWatermill, sysCeiling} {
		for _, batch := range []int{100, 500} {
			b.Run(fmt.Sprintf("system=%s/batch=%d", benchName(sys), batch), func(b *testing.B) {
				ctx := context.Background()
				o, err := parseOptions(nil, io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				o.events = b.N
				admin, err := newPool(ctx, o.dsn, 2)
				if err != nil {
					b.Fatal(err)
				}
				defer admin.Close()
				bn := &bench{o: o, admin: admin, log: io.Discard, rep: &Report{}}
				var res drainResult
				switch sys {
				case sysOutboxkit:
					res, err = bn.drainOutboxkit(ctx, batch, kindStore, "")
				case sysDelete:
					res, err = bn.drainOutboxkit(ctx, batch, kindStoreDelete, "")
				case sysWatermill:
					res, err = bn.drainWatermill(ctx, batch, "")
				case sysCeiling:
					res, err = bn.drainCeiling(ctx, batch, false, "")
				}
				if err != nil {
					b.Fatal(err)
				}
				if !res.check.OK {
					b.Fatal(res.check.Detail)
				}
				b.ReportMetric(res.seconds*1e9/float64(b.N), "ns/op")
				b.ReportMetric(res.rate(b.N), "events/s")
				b.ReportMetric(res.procCPU, "go-cpu-µs/event")
				b.ReportMetric(res.dbCPU, "pg-cpu-µs/event")
			})
		}
	}
}

// benchName turns a system's table name into a benchmark name.
func benchName(sys string) string {
	switch sys {
	case sysOutboxkit:
		return "outboxkit"
	case sysDelete:
		return "outboxkit-delete"
	case sysWatermill:
		return "watermill"
	case sysCeiling:
		return "ceiling"
	}
	return sys
}
