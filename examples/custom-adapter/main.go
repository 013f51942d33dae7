// Command custom-adapter shows how a platform team extends outboxkit with a
// transport of its own: WebhookPublisher (webhook.go) POSTs events to any
// HTTP endpoint, is proven by the core/coretest Publisher suite
// (webhook_test.go), and is wired into a relay here with middleware and
// tracing like any built-in transport. README.md walks through the steps.
//
// Run it as is to deliver events to a local endpoint that misbehaves the
// way real ones do (a 503 now and then, a 400 for a malformed event), or
// point it at your own with -url.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxkit/outboxkit/adapters/memory"
	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/tracing"
)

func main() {
	target := flag.String("url", "", "webhook `URL` to deliver to; empty starts a local endpoint")
	n := flag.Int("events", 20, "number of events to write")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *target, *n, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "custom-adapter:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, target string, n int, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if target == "" {
		ep := newFlakyEndpoint()
		defer ep.Close()
		target = ep.URL
	}

	// 1. The adapter, configured and validated once.
	pub, err := NewWebhookPublisher(WebhookConfig{URL: target, Concurrency: 4})
	if err != nil {
		return err
	}

	// 2. Wired into a relay like any transport. Middleware wraps the
	// publisher (tracing's spans, a log line per batch); hooks see each
	// settled batch (tracing's metrics). With no OpenTelemetry SDK set up,
	// tracing uses the global no-op providers: configure one to export.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := memory.NewStore(nil) // postgres.New(pool, nil) in production
	relay, err := core.NewRelay(store, pub, &core.RelayConfig{
		BatchSize:    10,
		PollInterval: 20 * time.Millisecond,
		Retry:        core.RetryPolicy{InitialBackoff: 20 * time.Millisecond, MaxAttempts: 5},
		Middleware: []core.PublisherMiddleware{
			tracing.PublisherMiddleware(tracing.WithMessagingSystem("webhook")),
			logPublishes(log),
		},
		Hooks: []core.RelayHook{tracing.RelayHook()},
	})
	if err != nil {
		return err
	}
	runCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	// 3. Events written as usual; with PostgreSQL, in the business
	// transaction.
	ids := make([]core.ID, 0, n)
	for i := range n {
		typ := "order.placed"
		if i == n-1 {
			typ = "order.malformed" // the endpoint answers 400: dead-lettered
		}
		e, err := core.NewEvent(typ, map[string]int{"order": i})
		if err != nil {
			return err
		}
		e.AggregateType, e.AggregateID = "order", fmt.Sprint(i)
		if err := store.Add(ctx, e); err != nil {
			return err
		}
		ids = append(ids, e.ID)
	}

	// Wait until every event is published or dead-lettered.
	var st core.Stats
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err = store.Stats(ctx); err != nil {
			return err
		}
		if st.Pending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d events still pending: %w", st.Pending, ctx.Err())
		case <-tick.C:
		}
	}
	stopRelay()
	if err := <-done; err != nil {
		return err
	}
	fmt.Fprintf(out, "events written: %d\ndelivered: %d\ndead-lettered: %d\n", n, n-int(st.DeadLettered), st.DeadLettered)
	printDeadLetters(out, store, ids)
	return nil
}

// printDeadLetters says why events were dead-lettered, from their records:
// a 4xx is dead-lettered at once, an unreachable endpoint only after
// MaxAttempts, and the two call for different fixes. Equal reasons are
// counted together.
func printDeadLetters(out io.Writer, store *memory.Store, ids []core.ID) {
	type reason struct {
		err      string
		attempts int
	}
	count := map[reason]int{}
	var order []reason
	for _, id := range ids {
		st, ok := store.Get(id)
		if !ok || st.DeadAt.IsZero() {
			continue
		}
		r := reason{st.LastError, st.Event.Attempts}
		if count[r] == 0 {
			order = append(order, r)
		}
		count[r]++
	}
	for _, r := range order {
		plural := "s"
		if r.attempts == 1 {
			plural = ""
		}
		fmt.Fprintf(out, "  %d × %s (after %d attempt%s)\n", count[r], r.err, r.attempts, plural)
	}
}

// logPublishes is a PublisherMiddleware of our own: a log line per batch.
// Middleware is a plain function type, so metrics, rate limits or circuit
// breakers attach the same way.
func logPublishes(log *slog.Logger) core.PublisherMiddleware {
	return func(next core.Publisher) core.Publisher {
		return core.PublisherFunc(func(ctx context.Context, events []core.Event) error {
			start := time.Now()
			err := next.Publish(ctx, events)
			log.InfoContext(ctx, "webhook batch", "events", len(events), "took", time.Since(start), "error", err)
			return err
		})
	}
}

// flakyEndpoint is a local webhook receiver that behaves like a real one
// on a bad day: the first attempt at every fifth event gets a 503 with
// Retry-After, and a malformed event gets a 400.
type flakyEndpoint struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int
}

func newFlakyEndpoint() *flakyEndpoint {
	ep := &flakyEndpoint{seen: map[string]int{}}
	ep.Server = httptest.NewServer(http.HandlerFunc(ep.serve))
	return ep
}

func (ep *flakyEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	e, err := core.EventFromCloudEventHeaders(flatHeaders(r.Header), readBody(r))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ep.mu.Lock()
	ep.seen[e.ID.String()]++
	attempt := ep.seen[e.ID.String()]
	n := len(ep.seen)
	ep.mu.Unlock()
	switch {
	case e.Type == "order.malformed":
		http.Error(w, "malformed order", http.StatusBadRequest)
	case n%5 == 0 && attempt == 1:
		w.Header().Set("Retry-After", "0")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// flatHeaders turns HTTP headers into the map core reads CloudEvents
// attributes from. Names are lower-cased: HTTP canonicalises them
// ("Ce-Id"), and custom ce-x-* names are case-sensitive in the event.
func flatHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			out[strings.ToLower(k)] = v[0]
		}
	}
	return out
}

func readBody(r *http.Request) []byte {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	return b
}
