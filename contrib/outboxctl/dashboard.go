package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/contrib/dashboard"
)

const dashboardHelp = `Serves the operators' web page (contrib/dashboard): the outbox's pending,
leased and dead-lettered counts, the oldest pending age, published events per
second and commit → publish latency over the last hour per destination, the
events with filters, one event in full, and dead letters grouped by type and
error, to replay or purge after a confirmation.

  outboxctl dashboard                                  http://127.0.0.1:8089
  outboxctl dashboard --inbox-table billing_inbox      the outbox and an inbox
  OUTBOX_DASHBOARD_TOKEN=... outboxctl dashboard --addr 0.0.0.0:8089

Off loopback it needs authentication: a bearer token (OUTBOX_DASHBOARD_TOKEN;
browsers log in once with it), basic auth (OUTBOX_DASHBOARD_BASIC_AUTH as
user:password), or --trusted-proxy-header behind an authenticating proxy.
Without any of them it refuses to start on a non-loopback address.
--read-only hides replay and purge. Every replay and purge is logged (stderr)
with who did it and how many events it touched.`

// defaultDashboardAddr is loopback: the dashboard can replay and purge.
const defaultDashboardAddr = "127.0.0.1:8089"

func (a *app) cmdDashboard(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dashboard", "[--addr HOST:PORT] [flags]", dashboardHelp)
	a.registerGlobals(fs)
	addr := fs.String("addr", envOr(a.getenv, "OUTBOX_DASHBOARD_ADDR", defaultDashboardAddr), "`address` to listen on (env OUTBOX_DASHBOARD_ADDR); off loopback it needs authentication")
	var inboxes, relays listFlag
	fs.Var(&inboxes, "inbox-table", "also show this inbox `table` (repeatable, or comma-separated), in --schema")
	fs.Var(&relays, "relay-url", "a relay's /readyz `URL` to show (repeatable, or comma-separated), e.g. http://127.0.0.1:9090/readyz")
	readOnly := fs.Bool("read-only", false, "refuse replay and purge")
	traceURL := fs.String("trace-url", a.getenv("OUTBOX_DASHBOARD_TRACE_URL"), "link events to their trace: a `URL` with {trace_id}, e.g. http://jaeger:16686/trace/{trace_id} (env OUTBOX_DASHBOARD_TRACE_URL)")
	proxyHeader := fs.String("trusted-proxy-header", "", "`header` an authenticating reverse proxy sets to the user's name (X-Forwarded-User), believed from loopback only")
	redactHeaders := fs.String("redact-headers", dashboard.DefaultRedactHeaders, "event headers whose names match this `regexp` are shown as [redacted]")
	basePath := fs.String("base-path", "", "`path` the dashboard is served under behind a proxy that strips it (e.g. /outbox)")
	var logs logFlags
	logs.register(fs)
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	auth := dashboard.Auth{Token: a.getenv("OUTBOX_DASHBOARD_TOKEN"), ProxyHeader: *proxyHeader}
	a.addSecret(auth.Token)
	if basic := a.getenv("OUTBOX_DASHBOARD_BASIC_AUTH"); basic != "" {
		user, pass, ok := strings.Cut(basic, ":")
		if !ok || user == "" || pass == "" {
			return usageError("OUTBOX_DASHBOARD_BASIC_AUTH must be user:password")
		}
		auth.BasicUser, auth.BasicPassword = user, pass
		a.addSecret(pass)
	}
	if err := dashboard.CheckListen(*addr, auth); err != nil {
		return usageError(strings.TrimPrefix(err.Error(), "outboxkit/dashboard: ") + " (OUTBOX_DASHBOARD_TOKEN, OUTBOX_DASHBOARD_BASIC_AUTH, --trusted-proxy-header)")
	}
	logs.redact = a.redact
	logger, err := logs.logger(a.stderr)
	if err != nil {
		return err
	}
	pool, err := a.connect(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := a.checkMigrated(ctx, pool); err != nil {
		return err
	}
	name := databaseLabel(a.g.databaseURL)
	targets := []dashboard.Target{{Pool: pool, Name: name, Schema: a.g.schema, Table: a.g.table}}
	for _, t := range inboxes {
		targets = append(targets, dashboard.Target{Pool: pool, Name: name, Schema: a.g.schema, Table: t, Inbox: true})
	}
	h, err := dashboard.New(dashboard.Config{
		Targets: targets, Auth: auth, ReadOnly: *readOnly, BasePath: *basePath,
		RedactHeaders: *redactHeaders, TraceURL: *traceURL, RelayHealthURLs: relays, Logger: logger,
	})
	if err != nil {
		return usageError(strings.TrimPrefix(err.Error(), "outboxkit/dashboard: "))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	logger.Info("dashboard serving", "url", "http://"+ln.Addr().String()+*basePath+"/", "read_only", *readOnly, "auth", auth.Enabled())
	fmt.Fprintf(a.stdout, "dashboard on http://%s%s/\n", ln.Addr(), *basePath)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	<-done
	return nil
}
