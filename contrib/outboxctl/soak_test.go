package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/pgtest"
	"github.com/outboxkit/outboxkit/postgres"
)

// soakFor is how long TestRelaySoak runs; `make relay-soak` sets it.
var soakFor = flag.Duration("soak", 0, "run TestRelaySoak for this long (make relay-soak: 10m)")

// TestRelaySoak runs the ten-schema relay service for -soak under a steady
// load (50 events a second spread over the tenants, /metrics scraped every
// 5 s and /readyz every 2 s, as Prometheus and a kubelet would) and fails
// when its resident memory (VmRSS in /proc/PID/status) grows more than 10 %
// beyond what it was at the end of the warm-up (the first fifth of the run,
// at most 2 minutes). It is not part of `make test`: `make relay-soak`
// runs it for 10 minutes, without -race, whose shadow memory is not the
// relay's.
func TestRelaySoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("a soak test of several minutes: run it with make relay-soak (-soak 10m)")
	}
	pool := pgtest.Pool(t, 4)
	q := newDevQStash(t, nil)
	schemas := make([]string, 10)
	tenants := make([]outbox, 10)
	for i := range schemas {
		schemas[i] = pgtest.Schema(t, pool, "soak")
		if err := postgres.Migrate(ctxT(t), pool, &postgres.MigrateConfig{Schema: schemas[i]}); err != nil {
			t.Fatal(err)
		}
		tenants[i] = outbox{pool: pool, schema: schemas[i]}
	}
	p := start(t, qstashEnv(), "relay", "--qstash-url", q.url, "--destination", q.consumer, "--log-format", "json",
		"--schemas", strings.Join(schemas, ","), "--wakeup", "listen", "--schema", schemas[0])
	base := httpAddr(t, p)
	pid := p.cmd.Process.Pid

	warmup := min(*soakFor/5, 2*time.Minute)
	began := time.Now()
	end := began.Add(*soakFor)
	var (
		mu      sync.Mutex
		written int
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	loop := func(every time.Duration, f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
					f(i)
				}
			}
		}()
	}
	// 5 events every 100 ms, one statement, a tenant after another.
	loop(100*time.Millisecond, func(i int) {
		o := tenants[i%len(tenants)]
		if _, err := o.pool.Exec(ctxT(t), "INSERT INTO "+o.table()+" (id, event_type, payload) SELECT gen_random_uuid(), 'soak', '{\"n\":1}' FROM generate_series(1, 5)"); err != nil {
			t.Errorf("insert: %v", err)
			return
		}
		mu.Lock()
		written += 5
		mu.Unlock()
	})
	loop(5*time.Second, func(int) { scrape(t, base) })
	loop(2*time.Second, func(int) { readyz(t, base) })

	type sample struct {
		at  time.Duration
		rss int64
	}
	var samples []sample
	tick := time.NewTicker(10 * time.Second)
	for now := time.Now(); now.Before(end); now = <-tick.C {
		if p.exited() {
			t.Fatalf("relay exited (code %d):\n%s", p.code, p.stderr)
		}
		rss, err := vmRSS(pid)
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, sample{time.Since(began), rss})
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	mu.Lock()
	total := written
	mu.Unlock()
	waitFor(t, 2*time.Minute, "every written event at the consumer", func() bool { return len(q.got()) >= total })

	// The baseline is the median of the warm-up's last 30 s, so one
	// sample taken just before a collection does not set it.
	var tail []int64
	for _, s := range samples {
		if s.at <= warmup && s.at > warmup-30*time.Second {
			tail = append(tail, s.rss)
		}
	}
	if len(tail) == 0 {
		t.Fatalf("no samples in the warm-up (%s)", warmup)
	}
	sort.Slice(tail, func(i, j int) bool { return tail[i] < tail[j] })
	baseline := tail[len(tail)/2]
	var peak, last int64
	for _, s := range samples {
		if s.at > warmup {
			peak, last = max(peak, s.rss), s.rss
		}
	}
	limit := baseline + baseline/10
	t.Logf("relay soak: %s, 10 tenants, %d events relayed; VmRSS after %s warm-up %s, peak after it %s (%+.1f%%), at the end %s (%+.1f%%); limit %s",
		*soakFor, total, warmup, mib(baseline), mib(peak), pct(peak, baseline), mib(last), pct(last, baseline), mib(limit))
	for _, s := range samples {
		t.Logf("  %6s  %s", s.at.Round(time.Second), mib(s.rss))
	}
	if peak > limit {
		t.Errorf("resident memory grew from %s to %s after the warm-up: more than 10 %%", mib(baseline), mib(peak))
	}
	var stats core.Stats
	for _, o := range tenants {
		st, err := (&outboxStats{o}).stats(t)
		if err != nil {
			t.Fatal(err)
		}
		stats.DeadLettered += st.DeadLettered
	}
	if stats.DeadLettered != 0 {
		t.Errorf("%d events dead-lettered during the soak", stats.DeadLettered)
	}
}

type outboxStats struct{ o outbox }

func (s *outboxStats) stats(t *testing.T) (core.Stats, error) {
	st, err := postgres.New(s.o.pool, &postgres.Config{Schema: s.o.schema})
	if err != nil {
		return core.Stats{}, err
	}
	return st.Stats(ctxT(t))
}

// vmRSS reads a process's resident memory in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func pct(v, base int64) float64 { return 100 * float64(v-base) / float64(base) }
