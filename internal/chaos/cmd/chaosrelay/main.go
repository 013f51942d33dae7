// Command chaosrelay is one relay process of the chaos suite
// (internal/chaos): the PostgreSQL store, a core.Relay and the QStash
// publisher, configured from flags. The suite starts several, kills them with
// SIGKILL, terminates their database connections and restarts them.
//
// Its connections carry -app-name as application_name (the LISTEN connection
// too: it copies the pool's settings, or -wakeup-url's with the name
// added), so the suite can find and terminate them. With -new-pool and
// -wakeup-url it runs through PgBouncer, its wake-ups past it. It reports what it observed on stdout, one line each, for the suite
// to count:
//
//	crash-after-publish      before it SIGKILLs itself (-crash-after)
//	settle-failed n=N        a batch of N events could not be settled
//	lease-lost n=N           another relay had taken over N events
//	stats goroutines=N ...   every -stats-every (the soak)
//
// SIGTERM or SIGINT stops it gracefully (exit 0).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/chaos/cmd/internal/worker"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/qstash"
)

type options struct {
	db                          worker.DB
	qstashURL, token, dest      string
	poisonType                  string
	batch, concurrency          int
	lease, publishTimeout, poll time.Duration
	maxAttempts                 int
	backoff, maxBackoff         time.Duration
	qstashRetries               int
	ordering                    bool
	crashAfter                  int
	wakeupURL                   string
	statsEvery                  time.Duration
}

func main() {
	var o options
	o.db.Flags(flag.CommandLine, "chaosrelay", "outbox schema", 3)
	flag.StringVar(&o.qstashURL, "qstash-url", "", "QStash API base URL (required)")
	flag.StringVar(&o.token, "qstash-token", "", "QStash token (required)")
	flag.StringVar(&o.dest, "dest", "", "consumer endpoint URL (required)")
	flag.StringVar(&o.poisonType, "poison-type", "", "events of this type fail to publish, transiently, forever")
	flag.IntVar(&o.batch, "batch", 20, "relay batch size")
	flag.IntVar(&o.concurrency, "concurrency", 1, "batches in flight")
	flag.DurationVar(&o.lease, "lease", 5*time.Second, "lease duration")
	flag.DurationVar(&o.publishTimeout, "publish-timeout", 2*time.Second, "publish timeout")
	flag.DurationVar(&o.poll, "poll", 250*time.Millisecond, "poll interval")
	flag.IntVar(&o.maxAttempts, "max-attempts", 100, "attempts before an event is dead-lettered")
	flag.DurationVar(&o.backoff, "backoff", 50*time.Millisecond, "first retry delay")
	flag.DurationVar(&o.maxBackoff, "max-backoff", time.Second, "longest retry delay")
	flag.IntVar(&o.qstashRetries, "qstash-retries", 40, "QStash delivery retries (Upstash-Retries)")
	flag.BoolVar(&o.ordering, "ordering", false, "per-aggregate ordering")
	flag.StringVar(&o.wakeupURL, "wakeup-url", "", "postgres:// URL of the wake-up connection, past a pooler (named -app-name too)")
	flag.IntVar(&o.crashAfter, "crash-after", 0, "SIGKILL itself right after the n-th accepted publish, before settling it (0: never)")
	flag.DurationVar(&o.statsEvery, "stats-every", 0, "print its goroutine count and Go heap in use every interval (0: never), for the soak")
	worker.Main("chaosrelay", func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	if o.db.URL == "" || o.db.Schema == "" || o.qstashURL == "" || o.token == "" || o.dest == "" {
		return errors.New("-database-url, -schema, -qstash-url, -qstash-token and -dest are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The store's log at debug level too: it says each time the WAL
	// stream pauses and for how long (postgres/wakeup.go), which the
	// suite reads to know how long a relay's wake-up connection may
	// legitimately stay away (env.wakeupPausedUntil). The store logs
	// little else at that level.
	storeLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pool, err := o.db.Pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	wakeupURL := o.wakeupURL
	if wakeupURL != "" {
		if wakeupURL, err = worker.WithAppName(wakeupURL, o.db.AppName); err != nil {
			return fmt.Errorf("-wakeup-url: %w", err)
		}
	}
	store, err := postgres.New(pool, &postgres.Config{
		Schema: o.db.Schema, Ordering: o.ordering, ListenBackoffMax: 500 * time.Millisecond, Logger: storeLog,
		WakeupURL: wakeupURL,
	})
	if err != nil {
		return err
	}
	retries := o.qstashRetries
	pcfgQ := &qstash.PublisherConfig{
		BaseURL: o.qstashURL, Token: o.token, Retries: &retries, MaxBatchSize: o.batch,
	}
	dest := qstash.Target{URL: o.dest}
	if o.poisonType != "" {
		// A publish that fails for one kind of event and never recovers,
		// transiently (so the relay retries it until MaxAttempts), while the
		// rest of its batch goes through.
		pcfgQ.Route = func(e core.Event) (qstash.Target, error) {
			if e.Type == o.poisonType {
				return qstash.Target{}, fmt.Errorf("chaos: no route for %s yet", e.Type)
			}
			return dest, nil
		}
	} else {
		pcfgQ.Destination = dest
	}
	pub, err := qstash.NewPublisher(pcfgQ)
	if err != nil {
		return err
	}
	defer pub.Close()

	relay, err := core.NewRelay(store, pub, &core.RelayConfig{
		BatchSize: o.batch, Concurrency: o.concurrency,
		LeaseDuration: o.lease, PublishTimeout: o.publishTimeout, PollInterval: o.poll,
		ShutdownTimeout: 2 * time.Second,
		Retry:           core.RetryPolicy{MaxAttempts: o.maxAttempts, InitialBackoff: o.backoff, MaxBackoff: o.maxBackoff},
		Middleware:      []core.PublisherMiddleware{crashAfter(o.crashAfter)},
		Hooks:           []core.RelayHook{reporter{}},
		Logger:          log,
	})
	if err != nil {
		return err
	}
	if o.statsEvery > 0 {
		go printStats(ctx, o.statsEvery)
	}
	return relay.Run(ctx)
}

// printStats prints "stats goroutines=N heap_inuse=B" every interval until
// ctx ends: the soak follows each relay's goroutines and heap over time.
func printStats(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(os.Stdout, "stats goroutines=%d heap_inuse=%d\n", runtime.NumGoroutine(), ms.HeapInuse)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// crashAfter SIGKILLs the process right after the n-th publish the transport
// accepted (at least one event of it), before the relay can settle it: the
// worst moment for a relay to die, since the whole batch is published again
// once its lease expires.
func crashAfter(n int) core.PublisherMiddleware {
	count := 0 // Concurrency may be > 1: guarded by the channel below
	sem := make(chan struct{}, 1)
	return func(next core.Publisher) core.Publisher {
		if n <= 0 {
			return next
		}
		return core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
			err := next.Publish(ctx, events)
			accepted := false
			for _, e := range core.EventErrors(len(events), err) {
				accepted = accepted || e == nil
			}
			if !accepted {
				return err
			}
			sem <- struct{}{}
			count++
			crash := count == n
			<-sem
			if crash {
				fmt.Fprintln(os.Stdout, "crash-after-publish")
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
			return err
		})
	}
}

// reporter tells the suite about batches the relay could not settle.
type reporter struct{}

func (reporter) AfterSettle(_ context.Context, info core.SettleInfo) {
	if info.Err == nil {
		return
	}
	var ll *core.LeaseLostError
	if errors.As(info.Err, &ll) {
		fmt.Fprintf(os.Stdout, "lease-lost n=%d\n", len(ll.IDs))
		return
	}
	fmt.Fprintf(os.Stdout, "settle-failed n=%d\n", len(info.Events))
}
