package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// These benchmarks feed the throughput comparison in docs/BENCHMARKS.md:
// run them with -benchtime and -count, and compare BenchmarkClaimSettle with
// BenchmarkSQLCeiling from the same run, never absolute numbers across
// machines.

func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{1, 100} {
		// NotifyAfterCommit's Add is NotifyOff's: the notification is
		// the caller's separate call.
		for _, mode := range []postgres.NotifyMode{postgres.NotifyInTransaction, postgres.NotifyOff} {
			b.Run(fmt.Sprintf("events=%d/notify=%v", n, mode), func(b *testing.B) {
				db := newDB(b, 4)
				s := newStore(b, db, postgres.Config{Notify: mode})
				ctx := context.Background()
				evs := events(b, n, "bench")
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range evs {
						evs[j].ID = core.NewID()
					}
					// The pool as DBTX: one autocommitted statement, so the
					// figure is Add's round trip plus its commit.
					if err := s.Add(ctx, db.pool, evs...); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkClaimSettle is the relay's database work per batch: claim under a
// lease, then settle every event as published, with `workers` relays side by
// side (the ceiling figures use 2).
func BenchmarkClaimSettle(b *testing.B) {
	for _, del := range []bool{false, true} {
		for _, batch := range []int{100, 500} {
			for _, workers := range []int{1, 2} {
				b.Run(fmt.Sprintf("delete=%v/batch=%d/workers=%d", del, batch, workers), func(b *testing.B) {
					db := newDB(b, int32(workers)+1)
					s := newStore(b, db, postgres.Config{DeletePublished: del})
					preload(b, db, b.N*batch)
					ctx := context.Background()
					b.ResetTimer()
					runWorkers(b, workers, b.N, func() int {
						bt, err := s.Claim(ctx, core.ClaimRequest{Limit: batch, LeaseFor: time.Minute})
						if err != nil {
							b.Error(err)
							return 0
						}
						out := make([]core.Outcome, len(bt.Events))
						for i, e := range bt.Events {
							out[i] = core.Outcome{ID: e.ID, Kind: core.Published}
						}
						if err := s.Settle(ctx, core.SettleRequest{Lease: bt.Lease, Outcomes: out}); err != nil {
							b.Error(err)
						}
						return len(bt.Events)
					})
				})
			}
		}
	}
}

// BenchmarkSQLCeiling runs BENCH.md's ceiling: the one-statement
// claim-and-mark, which takes no lease and so is no valid relay, on the same
// table shape, to quote BenchmarkClaimSettle as a ratio of it.
func BenchmarkSQLCeiling(b *testing.B) {
	for _, batch := range []int{100, 500} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/workers=%d", batch, workers), func(b *testing.B) {
				db := newDB(b, int32(workers)+1)
				preload(b, db, b.N*batch)
				tbl := fmt.Sprintf("%q.outbox_events", db.schema)
				sql := `WITH c AS (SELECT id FROM ` + tbl + ` WHERE published_at IS NULL AND dead_at IS NULL
ORDER BY available_at, pos LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE ` + tbl + ` t SET published_at = now() FROM c WHERE t.id = c.id RETURNING t.id, t.payload`
				ctx := context.Background()
				b.ResetTimer()
				runWorkers(b, workers, b.N, func() int {
					rows, err := db.pool.Query(ctx, sql, batch)
					if err != nil {
						b.Error(err)
						return 0
					}
					n := 0
					for rows.Next() {
						n++
					}
					if rows.Err() != nil {
						b.Error(rows.Err())
					}
					return n
				})
			})
		}
	}
}

// preload writes n pending events with generate_series (COPY-like speed; the
// benchmark measures relaying, not writing).
func preload(b *testing.B, db testDB, n int) {
	b.Helper()
	tbl := fmt.Sprintf("%q.outbox_events", db.schema)
	ctx := context.Background()
	_, err := db.pool.Exec(ctx, `INSERT INTO `+tbl+` (id, event_type, payload)
SELECT gen_random_uuid(), 'bench', '{"order": 12345, "status": "confirmed", "total": "99.95"}'::jsonb
FROM generate_series(1, $1::int)`, n)
	if err == nil {
		_, err = db.pool.Exec(ctx, "VACUUM ANALYZE "+tbl)
	}
	if err != nil {
		b.Fatal(err)
	}
}

// runWorkers calls batch until iterations batches ran, from workers
// goroutines, and reports events per second.
func runWorkers(b *testing.B, workers, iterations int, batch func() int) {
	var mu sync.Mutex
	left, events := iterations, 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				n := batch()
				mu.Lock()
				events += n
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
