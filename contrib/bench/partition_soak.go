package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// The partition-soak workload (make partition-soak): -soak-rate events/s
// written (8 producers, one event per transaction, NotifyAfterCommit) and
// relayed (core.Relay with its defaults) for -soak-duration, with a
// Retention keeping published events for -soak-retention (its other
// settings the defaults: batches of 1,000, a 100 ms pause, a pass a
// minute), on the plain layout and on the partitioned layout
// -soak-partitions names (default 5-minute partitions): one after the
// other, or with -soak-together side by side at the same time (each with
// its own producers, relay and retention, so both see the same machine
// and the same autovacuum), which halves the time on a machine with the
// cores for both: on the project's 2-core machine with autovacuum on, two
// layouts at 2,000 events/s each saturated both cores and reached about
// 1,500 events/s each. Every minute it samples each outbox
// table (all its partitions): total size, live and dead rows and VACUUMs
// (pg_stat_user_tables), partitions. Autovacuum is as the server has it:
// off on the project's main server, on (PostgreSQL's default) on the
// scratch cluster of scripts/partition-soak-autovacuum.sh, which is the
// production case.
//
// A partition can go once its period has ended and its last event was
// published -soak-retention ago, so the table holds between the retention
// and the retention plus one period of events, plus up to a pass's
// interval: with 5-minute partitions and 10 minutes' retention, between
// 10 and about 16 minutes' worth (under 20), so its size levels off after
// about 15 to 20 minutes, well within the default 30-minute run. With
// hourly partitions it holds up to about 70 minutes' worth and a run must
// last longer than that to show the plateau. The plain table's live rows
// stop growing after the retention, but every deleted and every updated
// row stays as a dead row until VACUUM.

const soakSampleEvery = time.Minute

type soakSample struct {
	at          time.Duration
	bytes       int64
	live, dead  int64
	partitions  int
	deletedRows int64
	vacuums     int64 // VACUUMs so far (manual and autovacuum) of the relations the table holds now
}

// deadShare is the sample's dead rows as a share of all its rows.
func (s soakSample) deadShare() float64 {
	if s.live+s.dead == 0 {
		return 0
	}
	return float64(s.dead) / float64(s.live+s.dead)
}

func (b *bench) runPartitionSoak(ctx context.Context) error {
	o := b.o
	var autovacuum string
	if err := b.admin.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum); err != nil {
		return err
	}
	when := "one after the other"
	if o.soakTogether {
		when = "side by side at the same time"
	}
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("partition-soak workload: %d events/s for %s per layout (plain, %s partitions; %s; 8 producers each, NotifyAfterCommit; relay defaults), Retention RetainPublished %s (other settings default); the server's autovacuum = %s; samples every %s: pg_total_relation_size and pg_stat_user_tables over pg_partition_tree",
		o.soakRate, o.soakFor, o.soakParts, when, o.soakRetain, autovacuum, soakSampleEvery))
	layouts := []postgres.Partitioning{postgres.PartitionNone, o.soakParts}
	for rep := 0; rep < o.reps; rep++ {
		type result struct {
			samples []soakSample
			run     soakRun
			err     error
		}
		results := make([]result, len(layouts))
		var wg sync.WaitGroup
		for i, layout := range layouts {
			one := func() {
				results[i].samples, results[i].run, results[i].err = b.soak(ctx, layout)
			}
			if !o.soakTogether {
				one()
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); one() }()
		}
		wg.Wait()
		for i, layout := range layouts {
			if err := results[i].err; err != nil {
				return fmt.Errorf("soak %s: %w", soakSys(layout), err)
			}
			b.soakReport(rep, layout, results[i].samples, results[i].run)
		}
	}
	return nil
}

func soakSys(layout postgres.Partitioning) string {
	if layout == postgres.PartitionNone {
		return sysPlain
	}
	return layout.String() + " partitions"
}

// soakReport adds one layout's soak to the report.
func (b *bench) soakReport(rep int, layout postgres.Partitioning, samples []soakSample, run soakRun) {
	o, sys := b.o, soakSys(layout)
	if len(samples) == 0 {
		return
	}
	last := samples[len(samples)-1]
	var maxDead int64
	var maxShare float64
	for _, s := range samples {
		maxDead, maxShare = max(maxDead, s.dead), max(maxShare, s.deadShare())
	}
	half := samples[len(samples)/2]
	cas := fmt.Sprintf("%d/s for %s, retention %s", o.soakRate, o.soakFor, o.soakRetain)
	b.rep.add("partition-soak", cas, sys, "MiB at the end", float64(last.bytes)/(1<<20))
	b.rep.add("partition-soak", cas, sys, "MiB at half time", float64(half.bytes)/(1<<20))
	b.rep.add("partition-soak", cas, sys, "dead rows at the end", float64(last.dead))
	b.rep.add("partition-soak", cas, sys, "most dead rows", float64(maxDead))
	b.rep.add("partition-soak", cas, sys, "dead rows / all rows at the end", last.deadShare())
	b.rep.add("partition-soak", cas, sys, "most dead rows / all rows", maxShare)
	b.rep.add("partition-soak", cas, sys, "live rows at the end", float64(last.live))
	b.rep.add("partition-soak", cas, sys, "rows deleted by retention", float64(last.deletedRows))
	b.rep.add("partition-soak", cas, sys, "vacuums", float64(last.vacuums))
	b.rep.add("partition-soak", cas, sys, "events/s written", run.written)
	b.rep.add("partition-soak", cas, sys, "events relayed", float64(run.relayed))
	b.rep.add("partition-soak", cas, sys, "events left pending", float64(run.pending))
	// Bounded: the largest size of the run's last third against
	// the largest of its middle third (1 when it levelled off).
	mid, late := thirdsMax(samples)
	if mid > 0 {
		b.rep.add("partition-soak", cas, sys, "largest MiB, last third / middle third", float64(late)/float64(mid))
	}
	b.logf("soak %s rep %d: %.0f events/s written, %d relayed, %d left pending", sys, rep+1, run.written, run.relayed, run.pending)
}

// soakRun is what one layout's soak wrote and relayed.
type soakRun struct {
	written float64 // events/s the producers achieved
	relayed int64   // events the sink received
	pending int64   // events still pending at the end
}

// thirdsMax is the largest size sampled in the middle third of the run
// and in its last third.
func thirdsMax(samples []soakSample) (mid, late int64) {
	if len(samples) == 0 {
		return 0, 0
	}
	end := samples[len(samples)-1].at
	for _, s := range samples {
		switch {
		case s.at > end*2/3:
			late = max(late, s.bytes)
		case s.at > end/3:
			mid = max(mid, s.bytes)
		}
	}
	return mid, late
}

// soak runs one layout's soak and returns its samples.
func (b *bench) soak(ctx context.Context, layout postgres.Partitioning) ([]soakSample, soakRun, error) {
	o := b.o
	var run soakRun
	s, err := b.layoutSchema(ctx, layout)
	if err != nil {
		return nil, run, err
	}
	defer s.drop()
	relayPool, err := newPool(ctx, o.dsn, 4)
	if err != nil {
		return nil, run, err
	}
	defer relayPool.Close()
	prodPool, err := newPool(ctx, o.dsn, int32(o.writers))
	if err != nil {
		return nil, run, err
	}
	defer prodPool.Close()
	cfg := postgres.Config{Schema: s.name, Notify: postgres.NotifyAfterCommit}
	relayStore, err := postgres.New(relayPool, &cfg)
	if err != nil {
		return nil, run, err
	}
	prodStore, err := postgres.New(prodPool, &cfg)
	if err != nil {
		return nil, run, err
	}
	sink := &countSink{}
	relay, err := core.NewRelay(relayStore, sink, nil)
	if err != nil {
		return nil, run, err
	}
	ret, err := postgres.NewRetention(relayPool, &postgres.RetentionConfig{Schema: s.name, RetainPublished: o.soakRetain, RetainProcessed: postgres.RetainForever})
	if err != nil {
		return nil, run, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- relay.Run(rctx) }()
	go func() { done <- ret.Run(rctx) }()

	var samples []soakSample
	start := time.Now()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(soakSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			sm, err := soakMeasure(rctx, s)
			if err != nil {
				continue
			}
			sm.at, sm.deletedRows = time.Since(start), ret.Stats().PublishedDeleted
			samples = append(samples, sm)
			b.logSoakSample(layout, sm)
		}
	}()
	n := o.soakRate * int(o.soakFor/time.Second)
	payload := []byte(benchPayload)
	run.written, err = pace(ctx, n, o.soakRate, o.writers, func(ctx context.Context, i int) error {
		e := core.Event{ID: core.NewID(), Type: "bench", Payload: payload}
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
		prodStore.Notify()
		return nil
	})
	// A last sample once what was written is relayed.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		left, perr := pendingCount(ctx, s)
		run.pending = left
		if perr != nil || left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the table, bounded by the deadline
	}
	run.relayed = sink.n.Load()
	cancel()
	<-sampled
	<-done
	<-done
	if err != nil {
		return nil, run, err
	}
	if sm, merr := soakMeasure(context.WithoutCancel(ctx), s); merr == nil {
		sm.at, sm.deletedRows = time.Since(start), ret.Stats().PublishedDeleted
		samples = append(samples, sm)
		b.logSoakSample(layout, sm)
	}
	return samples, run, nil
}

// logSoakSample logs one sample as it is taken, so a long soak can be
// followed.
func (b *bench) logSoakSample(layout postgres.Partitioning, s soakSample) {
	b.logf("soak %s at %s: %.1f MiB, %d live, %d dead rows (%.1f %%), %d partitions, %d deleted by retention, %d vacuums",
		soakSys(layout), s.at.Round(time.Second), float64(s.bytes)/(1<<20), s.live, s.dead, 100*s.deadShare(), s.partitions, s.deletedRows, s.vacuums)
}

// soakMeasure reads the outbox table's size and rows over its partitions.
func soakMeasure(ctx context.Context, s *schema) (soakSample, error) {
	time.Sleep(1100 * time.Millisecond) // let the backends flush their statistics
	var sm soakSample
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(t.relid)), 0)::int8,
	COALESCE(sum(st.n_live_tup), 0)::int8, COALESCE(sum(st.n_dead_tup), 0)::int8, count(*) FILTER (WHERE t.isleaf)::int,
	COALESCE(sum(st.vacuum_count + st.autovacuum_count), 0)::int8
FROM `+outboxTree+` LEFT JOIN pg_stat_user_tables st ON st.relid = t.relid`, s.table(postgres.DefaultTable)).
		Scan(&sm.bytes, &sm.live, &sm.dead, &sm.partitions, &sm.vacuums)
	return sm, err
}
