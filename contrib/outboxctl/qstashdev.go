package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

const qstashDevHelp = `Runs an in-memory QStash (package qstashdev) for local development and
tests, with the credentials of Upstash's official dev server. It prints them
as export lines at start; paste them into the shell that runs your relay
and consumers:

  export QSTASH_URL=http://127.0.0.1:8080
  export QSTASH_TOKEN=...
  export QSTASH_CURRENT_SIGNING_KEY=...
  export QSTASH_NEXT_SIGNING_KEY=...

Messages live in memory only; they are dropped when it stops. --addr with
port 0 picks a free port (the printed QSTASH_URL has it). It stops on
SIGINT or SIGTERM, giving deliveries in flight a few seconds.

The dev token is public (Upstash documents it), so with it qstash-dev
listens on loopback only; on any other address (0.0.0.0 for a container,
say) pass --token with a secret of your own, and give clients that token.`

// qstashDevShutdown bounds the graceful stop of qstash-dev.
const qstashDevShutdown = 5 * time.Second

func (a *app) cmdQStashDev(ctx context.Context, args []string) error {
	fs := a.newFlagSet("qstash-dev", "[--addr HOST:PORT] [--token SECRET]", qstashDevHelp)
	addr := fs.String("addr", qstashdev.DefaultAddr, "`address` to listen on")
	token := fs.String("token", qstashdev.DefaultToken, "API `token` clients must send; needed off loopback, where the public default is refused")
	var lf logFlags
	lf.register(fs)
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := lf.logger(a.stderr)
	if err != nil {
		return err
	}
	if *token == "" {
		return usageError("--token is empty: pass a secret of your own, or leave --token out for the dev token (loopback only)")
	}
	if *token != qstashdev.DefaultToken {
		a.addSecret(*token)
	}
	srv, err := qstashdev.New(qstashdev.Config{Token: *token, Logger: logger})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("cannot listen on %s: %s: pick another --addr (port 0 picks a free one)", *addr, netCause(err))
	}
	// Checked before the credentials are printed, so a refused start
	// prints none; the library's own message names Config.Token.
	if err := srv.CheckListenAddr(ln.Addr()); err != nil {
		_ = ln.Close()
		_ = srv.Close()
		return usageError(fmt.Sprintf("refusing to serve on %s with the public dev token: anyone who can reach that address could publish and read messages; pass --token with a secret of your own (clients then send it as QSTASH_TOKEN), or listen on 127.0.0.1", ln.Addr()))
	}
	keys := srv.Keys()
	fmt.Fprintf(a.stdout, "export QSTASH_URL=http://%s\nexport QSTASH_TOKEN=%s\nexport QSTASH_CURRENT_SIGNING_KEY=%s\nexport QSTASH_NEXT_SIGNING_KEY=%s\n",
		ln.Addr(), *token, keys.Current, keys.Next)
	logger.Info("qstash-dev listening; stop with Ctrl-C", "addr", ln.Addr().String())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-served:
		_ = srv.Close()
		return fmt.Errorf("qstash-dev stopped: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), qstashDevShutdown)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("qstash-dev shutdown: %w", err)
	}
	logger.Info("qstash-dev stopped")
	return nil
}
