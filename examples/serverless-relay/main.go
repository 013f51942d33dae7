// Command serverless-relay runs an outbox relay the way a serverless
// deployment does, with no long-running process: a QStash schedule calls
// an HTTP endpoint every minute, and each call runs one bounded drain of
// the outbox (qstash.DrainHandler) and answers with what it did.
//
// Everything runs in this process: a qstashdev server whose clock the
// program moves a minute at a time (so the example takes seconds, not
// minutes), an in-memory outbox holding a backlog, the drain endpoint and a
// consumer that verifies and applies each event once. In a deployment the
// store is postgres.New(pool, ...), the endpoints are your functions, and
// the schedule is created once against QStash:
//
//	curl -X POST "$QSTASH_URL/v2/schedules/https://relay.example.com/drain" \
//	  -H "Authorization: Bearer $QSTASH_TOKEN" -H "Upstash-Cron: * * * * *"
//
// It exits non-zero unless every event is applied exactly once.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/qstash"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

func main() {
	events := flag.Int("events", 300, "events in the backlog")
	budget := flag.Duration("budget", 2*time.Second, "each run's time budget (25s by default in production)")
	flag.Parse()
	if err := run(*events, *budget); err != nil {
		log.Fatal(err)
	}
}

// slowTransport stands in for a real network: each batch takes 100ms, so
// the backlog takes several runs.
func slowTransport(next core.Publisher) core.Publisher {
	return core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return core.NotAttempted(ctx.Err())
		}
		return next.Publish(ctx, events)
	})
}

func run(n int, budget time.Duration) error {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	clock := coretest.NewFakeClock(time.Now().Add(-4 * time.Minute).Truncate(time.Minute))

	dev, err := qstashdev.New(qstashdev.Config{Clock: clock, Logger: quiet})
	if err != nil {
		return err
	}
	defer dev.Close()
	devLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go dev.Serve(devLn)
	devURL := "http://" + devLn.Addr().String()

	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	appURL := "http://" + appLn.Addr().String()
	mux := http.NewServeMux()
	app := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go app.Serve(appLn)
	defer app.Close()

	// The consumer: verify, apply once.
	var mu sync.Mutex
	applied := map[core.ID]int{}
	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey, NextSigningKey: qstashdev.DefaultNextSigningKey,
		URL: appURL + "/events", Deduper: memory.NewDeduper(), Consumer: "billing", Clock: clock, Logger: quiet,
		Handler: core.HandlerFunc(func(_ context.Context, e core.Event) error {
			mu.Lock()
			applied[e.ID]++
			mu.Unlock()
			return nil
		}),
	})
	if err != nil {
		return err
	}
	mux.Handle("POST /events", rc)

	// The outbox and its backlog.
	store := memory.NewStore(nil)
	backlog := make([]core.Event, n)
	for i := range backlog {
		if backlog[i], err = core.NewEvent("order.placed", map[string]int{"order": i}); err != nil {
			return err
		}
	}
	if err := store.Add(ctx, backlog...); err != nil {
		return err
	}

	// The relay, run only by the drain endpoint.
	pub, err := qstash.NewPublisher(&qstash.PublisherConfig{BaseURL: devURL, Token: qstashdev.DefaultToken,
		Destination: qstash.Target{URL: appURL + "/events"}})
	if err != nil {
		return err
	}
	defer pub.Close()
	// Each run claims batches until its budget, less PublishTimeout and a
	// settle, is spent. A publish that fails is retried by a later run.
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{BatchSize: 25, PublishTimeout: 500 * time.Millisecond,
		LeaseDuration: 5 * time.Second, Middleware: []core.PublisherMiddleware{slowTransport}, Logger: quiet,
		Retry: core.RetryPolicy{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}})
	if err != nil {
		return err
	}
	runs := make(chan qstash.DrainRun, 64)
	dh, err := qstash.NewDrainHandler(&qstash.DrainHandlerConfig{
		CurrentSigningKey: qstashdev.DefaultCurrentSigningKey, NextSigningKey: qstashdev.DefaultNextSigningKey,
		URL: appURL + "/drain", Relay: relay, Budget: budget, Clock: clock, Logger: quiet,
		OnRun: func(_ context.Context, r qstash.DrainRun) { runs <- r },
	})
	if err != nil {
		return err
	}
	mux.Handle("POST /drain", dh)

	// The schedule: every minute.
	req, _ := http.NewRequest(http.MethodPost, devURL+"/v2/schedules/"+appURL+"/drain", nil)
	req.Header.Set("Authorization", "Bearer "+qstashdev.DefaultToken)
	req.Header.Set("Upstash-Cron", "* * * * *")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	var created struct {
		ScheduleID string `json:"scheduleId"`
	}
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("create schedule: %d %v", resp.StatusCode, err)
	}
	fmt.Printf("schedule %s calls %s/drain every minute; %d events pending\n", created.ScheduleID, appURL, n)

	for minute := 1; ; minute++ {
		if st, _ := store.Stats(ctx); st.Pending == 0 {
			break
		}
		if minute > 20 {
			return fmt.Errorf("backlog not drained after %d runs", minute-1)
		}
		at := dev.Schedules()[0].NextScheduleTime
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := clock.WaitForDeadline(wctx, at); err != nil {
			cancel()
			return fmt.Errorf("the schedule armed no timer: %w", err)
		}
		clock.Set(at)
		var r qstash.DrainRun
		select {
		case r = <-runs:
		case <-wctx.Done():
			cancel()
			return fmt.Errorf("run %d did not come", minute)
		}
		err := dev.WaitIdle(wctx)
		cancel()
		if err != nil {
			return err
		}
		fmt.Printf("run %d (%s): %-7s published %3d in %v (budget %v)\n", minute, at.Format("15:04"), r.Status, r.Report.Published, r.Duration.Round(time.Millisecond), budget)
		if r.Duration > budget+250*time.Millisecond {
			return fmt.Errorf("run %d took %v, over its budget", minute, r.Duration)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range backlog {
		if applied[e.ID] != 1 {
			return fmt.Errorf("event %s applied %d times", e.ID, applied[e.ID])
		}
	}
	fmt.Printf("all %d events applied exactly once\n", n)
	return nil
}
