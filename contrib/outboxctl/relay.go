package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

const relayHelp = `Relays events from the outbox to a transport until SIGINT or SIGTERM, then
shuts down gracefully: it stops claiming, lets in-flight publishes finish for
up to --shutdown-timeout, and releases the events of those it had to cancel,
so another relay takes them at once instead of after --lease.

Run as many relays as you like against one outbox: each claims batches under
a lease with FOR UPDATE SKIP LOCKED, so they never publish the same event
at the same time and need no coordination.

Transports:
  qstash  Upstash QStash (--qstash-url, --qstash-token). Routing per event:
          its destination column, else --routes, else --destination.
  nats    NATS JetStream (--nats-url). The topic (subject) is the event's
          destination column, else --routes, else --destination, else its
          type. A stream must cover the subjects (or --nats-auto-provision).
          Nats-Msg-Id is the event ID, so JetStream drops republished events
          within its duplicate window.
  amqp    AMQP 0.9.1, e.g. RabbitMQ (--amqp-url). Topics as for nats; each is
          a durable fanout exchange of that name, declared on first use; bind
          your queues to it. Publisher confirms are on.

--routes FILE maps event types to destinations, as JSON
  {"order.confirmed": "https://billing.example.com/qstash/orders",
   "order.shipped": {"urlGroup": "shipping", "queue": "shipments"}}
or one type=destination per line (# starts a comment):
  order.confirmed = https://billing.example.com/qstash/orders
  order.shipped   = shipping
For QStash a destination is a URL (http:// or https://) or a URL group name;
for nats and amqp it is a topic.

--lease must exceed --publish-timeout: a lease must not expire while its
publish still runs, or another relay would publish the same events.

With --drain the relay processes every due event once and exits (for cron
or serverless schedules) instead of running until stopped.

As a service it serves, on --http-addr (default :9464; "" turns it off):
  /metrics  Prometheus text: outboxkit_* per tenant (labels database,
            schema, table) and outboxctl_* about the service itself
  /healthz  200 while the process runs
  /readyz   200 when the database answers, every tenant's schema is at
            the expected migration, the transport answers and claims
            complete; else 503 with the reasons in JSON
  /debug/pprof/  only with --pprof
OTLP export follows the OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT,
_PROTOCOL, _HEADERS, OTEL_SERVICE_NAME, OTEL_TRACES_EXPORTER=none, ...); it
is off until an endpoint or an exporter is named.

Tenants: --schemas a,b,c relays several schemas of --database-url, each with
its own relay; --schemas '*' every schema holding --table, looked for again
every --discover-interval; a --config file adds other databases. A tenant
that fails (its table dropped) is reported and retried with backoff; the
others go on. The tenants of a database share one pool (--max-conns).

--wait D retries PostgreSQL, the migrations and the transport at start for
up to D instead of exiting. Retention (--retain-published, --retain-processed)
runs on one relay per table at a time; on a partitioned table that relay
also vacuums the partitions every --vacuum-interval.

--config FILE is YAML whose keys are these flags' names (plus databases);
${VAR} in a value reads the environment. A flag beats its environment
variable, which beats the file. --print-config shows the result, secrets
redacted.`

func (a *app) cmdRelay(ctx context.Context, args []string) error {
	fs := a.newFlagSet("relay", "[--transport qstash|nats|amqp] [--destination D | --routes FILE] [--config FILE] [flags]", relayHelp)
	a.registerGlobals(fs)
	var s relaySettings
	s.register(fs, a.getenv)
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if err := s.loadConfigFile(fs, a.getenv, a.globalsGiven); err != nil {
		return err
	}
	if s.cfg.ShutdownTimeout == 0 && flagGiven(fs, "shutdown-timeout") {
		// Zero means "default" (10s) to core.RelayConfig and negative
		// means no grace; an operator who typed 0s meant no grace.
		s.cfg.ShutdownTimeout = -1
	}
	s.httpAddrGiven = flagGiven(fs, "http-addr") || a.getenv("OUTBOX_HTTP_ADDR") != ""
	if s.printConfig {
		return a.printRelayConfig(fs, &s)
	}
	s.lf.redact = a.redact
	logger, err := s.lf.logger(a.stderr)
	if err != nil {
		return err
	}
	cfg := &s.cfg
	cfg.Logger = logger
	mode, err := parseWakeup(s.wakeup, s.noNotify)
	if err != nil {
		return err
	}
	s.mode = mode
	cfg.DisableNotifier = mode == postgres.WakeupPoll
	// Check the settings before connecting anywhere: a typo in a flag
	// should not wait for a database to answer.
	if err := checkRelayFlags(cfg); err != nil {
		return err
	}
	if err := s.checkServiceFlags(); err != nil {
		return err
	}
	if _, err := core.NewRelay(nopStore{}, core.PublisherFunc(nopPublish), cfg); err != nil {
		return relayConfigError(err)
	}
	dbs, err := a.databaseSpecs(&s)
	if err != nil {
		return err
	}
	connect, err := a.transport(&s.tf, logger)
	if err != nil {
		return err
	}
	if s.drain {
		return a.drainRelay(ctx, &s, dbs, connect, logger)
	}
	return a.serveRelay(ctx, &s, dbs, connect, logger)
}

// drainRelay is --drain: every tenant's due events once, then exit.
func (a *app) drainRelay(ctx context.Context, s *relaySettings, dbs []databaseSpec, connect connector, logger *slog.Logger) error {
	tel, err := newTelemetry(ctx, a.getenv, logger, false)
	if err != nil {
		return err
	}
	defer tel.shutdown(logger)
	start := time.Now()
	total := 0
	var pub core.Publisher
	for _, spec := range dbs {
		pool, err := a.connectURL(ctx, spec.URL, spec.poolSize(s), spec.poolSizeExact(s))
		if err != nil {
			return a.dbErrorAt(err, spec.URL, spec.firstSchema(), spec.Table)
		}
		defer pool.Close()
		schemas, err := a.tenantSchemas(ctx, pool, spec)
		if err != nil {
			return err
		}
		for _, schema := range schemas {
			if err := a.checkTenantMigrated(ctx, pool, spec.URL, schema, spec.Table); err != nil {
				return err
			}
			if pub == nil {
				p, _, closePub, err := connect(ctx)
				if err != nil {
					return err
				}
				defer closePub()
				pub = p
			}
			store, err := postgres.New(pool, s.storeConfig(spec, schema, logger))
			if err != nil {
				return a.dbErrorAt(err, spec.URL, schema, spec.Table)
			}
			cfg := s.cfg
			cfg.Hooks = []core.RelayHook{batchLogger{logger}}
			cfg.Middleware = tel.middleware(&s.tf)
			relay, err := core.NewRelay(store, pub, &cfg)
			if err != nil {
				return relayConfigError(err)
			}
			n, err := relay.Drain(ctx)
			total += n
			if err != nil {
				return fmt.Errorf("drain stopped after %d event(s): %w", total, a.dbErrorAt(err, spec.URL, schema, spec.Table))
			}
		}
	}
	fmt.Fprintf(a.stdout, "drained %d event(s) in %s\n", total, formatDuration(time.Since(start)))
	return nil
}

// checkRelayFlags refuses values the library would silently replace by its
// default (zero means "default" in core.RelayConfig), since an operator
// who typed --batch-size 0 did not mean 100.
func checkRelayFlags(cfg *core.RelayConfig) error {
	for name, v := range map[string]int{"batch-size": cfg.BatchSize, "concurrency": cfg.Concurrency, "max-attempts": cfg.Retry.MaxAttempts} {
		if v < 1 {
			return usageError(fmt.Sprintf("--%s is %d: it must be at least 1", name, v))
		}
	}
	for name, v := range map[string]time.Duration{"lease": cfg.LeaseDuration, "poll-interval": cfg.PollInterval, "initial-backoff": cfg.Retry.InitialBackoff, "max-backoff": cfg.Retry.MaxBackoff} {
		if v <= 0 {
			return usageError(fmt.Sprintf("--%s must be positive", name))
		}
	}
	return nil
}

// flagOfField maps RelayConfig fields to the flags that set them, so a
// validation error names what the operator typed.
var flagOfField = map[string]string{
	"BatchSize": "--batch-size", "Concurrency": "--concurrency", "LeaseDuration": "--lease",
	"PublishTimeout": "--publish-timeout", "PollInterval": "--poll-interval", "ShutdownTimeout": "--shutdown-timeout",
	"Retry.MaxAttempts": "--max-attempts", "Retry.InitialBackoff": "--initial-backoff", "Retry.MaxBackoff": "--max-backoff",
	"MaxAttempts": "--max-attempts", "InitialBackoff": "--initial-backoff", "MaxBackoff": "--max-backoff",
}

func relayConfigError(err error) error {
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	reason := ce.Reason
	// Longest names first, so "Retry.MaxBackoff" is not half-replaced by
	// "MaxBackoff".
	for _, field := range []string{"Retry.MaxAttempts", "Retry.InitialBackoff", "Retry.MaxBackoff", "LeaseDuration", "PublishTimeout",
		"PollInterval", "ShutdownTimeout", "BatchSize", "Concurrency", "MaxAttempts", "InitialBackoff", "MaxBackoff"} {
		reason = strings.ReplaceAll(reason, field, flagOfField[field])
	}
	name := flagOfField[ce.Field]
	if name == "" {
		name = ce.Field
	}
	return usageError(fmt.Sprintf("%s %s", name, reason))
}

// nopStore and nopPublish stand in for the real ones when validating the
// relay configuration before connecting.
type nopStore struct{}

func (nopStore) Claim(context.Context, core.ClaimRequest) (core.Batch, error) {
	return core.Batch{}, nil
}
func (nopStore) Settle(context.Context, core.SettleRequest) error { return nil }

func nopPublish(context.Context, []core.Event) error { return nil }

// batchLogger logs every settled batch at debug level, for following a
// relay's work live; failures are logged by the relay itself.
type batchLogger struct{ log *slog.Logger }

func (b batchLogger) AfterSettle(ctx context.Context, info core.SettleInfo) {
	if !b.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	counts := map[core.OutcomeKind]int{}
	for _, o := range info.Outcomes {
		counts[o.Kind]++
	}
	b.log.DebugContext(ctx, "batch settled", "events", len(info.Events),
		"published", counts[core.Published], "retry", counts[core.Retry], "dead_lettered", counts[core.DeadLettered],
		"released", counts[core.Released], "publish_duration", info.PublishDuration.String())
}

// parseWakeup reads --wakeup; --no-notify, from before the flag existed,
// means poll and contradicts any other mode given.
func parseWakeup(v string, noNotify bool) (postgres.WakeupMode, error) {
	var mode postgres.WakeupMode
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "auto":
		mode = postgres.WakeupAuto
	case "listen":
		mode = postgres.WakeupListen
	case "poll":
		mode = postgres.WakeupPoll
	default:
		return 0, usageError(fmt.Sprintf("--wakeup %q: want auto, listen or poll", v))
	}
	if noNotify && mode != postgres.WakeupPoll && mode != postgres.WakeupAuto {
		return 0, usageError(fmt.Sprintf("--no-notify contradicts --wakeup %s: give one of them", mode))
	}
	if noNotify {
		mode = postgres.WakeupPoll
	}
	return mode, nil
}
