// Command qstash-dev runs qstashdev, the in-memory QStash, on an address:
//
//	go run ./contrib/qstash-dev --addr 127.0.0.1:8080
//
// It prints the credentials clients need (the same defaults as Upstash's
// own dev server, so existing tooling works unchanged) and shuts down
// gracefully on SIGINT or SIGTERM, letting deliveries in flight finish.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "qstash-dev:", err)
		}
		os.Exit(2)
	}
}

// run is main without the process: it serves until ctx is done. It is a
// function so tests can run it on a free port and stop it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qstash-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr    = fs.String("addr", qstashdev.DefaultAddr, "address to listen on")
		token   = fs.String("token", qstashdev.DefaultToken, "bearer token clients must send")
		current = fs.String("current-signing-key", qstashdev.DefaultCurrentSigningKey, "key deliveries are signed with")
		next    = fs.String("next-signing-key", qstashdev.DefaultNextSigningKey, "key that becomes current on rotation")
		backoff = fs.Float64("backoff-scale", 1, "multiplier for retry delays (0.01 turns QStash's 12s first retry into 120ms)")
		maxBody = fs.Int64("max-body-bytes", 1<<20, "largest message body accepted")
		workers = fs.Int("concurrency", 32, "delivery attempts in flight at once")
		timeout = fs.Duration("timeout", 30*time.Second, "attempt timeout when a message sets no Upstash-Timeout")
		grace   = fs.Duration("shutdown-timeout", 10*time.Second, "how long deliveries in flight may finish at shutdown")
		verbose = fs.Bool("v", false, "log delivery failures")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every option is a flag (see -h)", fs.Args())
	}
	level := slog.LevelWarn + 1
	if *verbose {
		level = slog.LevelInfo
	}
	srv, err := qstashdev.New(qstashdev.Config{
		Token:             *token,
		CurrentSigningKey: *current,
		NextSigningKey:    *next,
		BackoffScale:      *backoff,
		MaxBodyBytes:      *maxBody,
		Concurrency:       *workers,
		Timeout:           *timeout,
		Logger:            slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		srv.Close()
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "qstash-dev listening on %s\n\n", url)
	fmt.Fprintf(stdout, "QSTASH_URL=%s\n", url)
	fmt.Fprintf(stdout, "QSTASH_TOKEN=%s\n", *token)
	fmt.Fprintf(stdout, "QSTASH_CURRENT_SIGNING_KEY=%s\n", *current)
	fmt.Fprintf(stdout, "QSTASH_NEXT_SIGNING_KEY=%s\n", *next)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "\nshutting down")
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; err == nil && !errors.Is(serr, http.ErrServerClosed) {
		err = serr
	}
	return err
}
