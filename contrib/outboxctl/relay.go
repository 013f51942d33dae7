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
or serverless schedules) instead of running until stopped.`

func (a *app) cmdRelay(ctx context.Context, args []string) error {
	fs := a.newFlagSet("relay", "[--transport qstash|nats|amqp] [--destination D | --routes FILE] [flags]", relayHelp)
	a.registerGlobals(fs)
	var tf transportFlags
	tf.register(fs, a.getenv)
	def := core.RelayConfig{}.WithDefaults()
	var cfg core.RelayConfig
	fs.IntVar(&cfg.BatchSize, "batch-size", def.BatchSize, "most events claimed and published at once")
	fs.IntVar(&cfg.Concurrency, "concurrency", def.Concurrency, "batches in flight at once")
	newDurationFlag(fs, &cfg.LeaseDuration, "lease", def.LeaseDuration, "how long a claim keeps other relays off its events; must exceed --publish-timeout")
	newDurationFlag(fs, &cfg.PublishTimeout, "publish-timeout", 0, "bound on one publish call (default 10s, or half of --lease when that is shorter)")
	newDurationFlag(fs, &cfg.PollInterval, "poll-interval", def.PollInterval, "idle wait between looks for due events when no notification arrives")
	newDurationFlag(fs, &cfg.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "on SIGINT/SIGTERM, how long in-flight publishes may finish before they are cancelled and their events released; 0s cancels them at once")
	fs.IntVar(&cfg.Retry.MaxAttempts, "max-attempts", def.Retry.MaxAttempts, "attempts after which a failing event is dead-lettered")
	newDurationFlag(fs, &cfg.Retry.InitialBackoff, "initial-backoff", def.Retry.InitialBackoff, "delay after the first failed attempt; it doubles per attempt, with jitter")
	newDurationFlag(fs, &cfg.Retry.MaxBackoff, "max-backoff", def.Retry.MaxBackoff, "cap on the delay between attempts")
	noNotify := fs.Bool("no-notify", false, "open no wake-up connection and find events by polling alone (the same as --wakeup poll)")
	wakeup := fs.String("wakeup", envOr(a.getenv, "OUTBOX_WAKEUP", "auto"), "how the relay learns of new events at once: `auto` (a WAL stream where the server allows logical replication, else LISTEN, said once in the log), listen, or poll (env OUTBOX_WAKEUP)")
	wakeupURL := fs.String("wakeup-url", a.getenv("OUTBOX_WAKEUP_URL"), "connection `URL` of the wake-up connection when --database-url goes through PgBouncer: PostgreSQL itself (env OUTBOX_WAKEUP_URL)")
	deletePublished := fs.Bool("delete-published", false, "delete each row once published instead of keeping it for prune: faster, but published events can be neither inspected nor replayed")
	ordering := fs.Bool("ordering", false, "per-aggregate ordering: claim only each aggregate's oldest pending event (writers and relays of one table must agree)")
	fs.StringVar(&cfg.Destination, "only-destination", "", "claim only events whose destination column equals this `value` (a relay dedicated to one slow destination)")
	drain := fs.Bool("drain", false, "process every due event once, then exit")
	var lf logFlags
	lf.register(fs)
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.ShutdownTimeout == 0 && flagGiven(fs, "shutdown-timeout") {
		// Zero means "default" (10s) to core.RelayConfig and negative
		// means no grace; an operator who typed 0s meant no grace.
		cfg.ShutdownTimeout = -1
	}
	lf.redact = a.redact
	logger, err := lf.logger(a.stderr)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	mode, err := parseWakeup(*wakeup, *noNotify)
	if err != nil {
		return err
	}
	cfg.DisableNotifier = mode == postgres.WakeupPoll
	cfg.Hooks = []core.RelayHook{batchLogger{logger}}
	// Check the settings before connecting anywhere: a typo in a flag
	// should not wait for a database to answer.
	if err := checkRelayFlags(&cfg); err != nil {
		return err
	}
	if _, err := core.NewRelay(nopStore{}, core.PublisherFunc(nopPublish), &cfg); err != nil {
		return relayConfigError(err)
	}
	connect, err := a.transport(&tf, logger)
	if err != nil {
		return err
	}

	// The relay writes no events, so its store's Notify does not matter;
	// Wakeup decides its wake-up connection.
	pool, store, err := a.openStore(ctx, int32(cfg.Concurrency)+2, postgres.Config{
		Ordering: *ordering, DeletePublished: *deletePublished, Wakeup: mode, WakeupURL: *wakeupURL, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := a.checkMigrated(ctx, pool); err != nil {
		return err
	}
	pub, closePub, err := connect(ctx)
	if err != nil {
		return err
	}
	defer closePub()
	relay, err := core.NewRelay(store, pub, &cfg)
	if err != nil {
		return relayConfigError(err)
	}
	rc := relay.Config()

	if *drain {
		start := time.Now()
		n, err := relay.Drain(ctx)
		if err != nil {
			return fmt.Errorf("drain stopped after %d event(s): %w", n, a.dbError(err))
		}
		fmt.Fprintf(a.stdout, "drained %d event(s) in %s\n", n, formatDuration(time.Since(start)))
		return nil
	}

	logger.Info("relay started",
		"transport", strings.ToLower(tf.kind), "database", displayURL(a.g.databaseURL), "schema", a.g.schema, "table", a.g.table,
		"batch_size", rc.BatchSize, "concurrency", rc.Concurrency, "lease", rc.LeaseDuration.String(), "publish_timeout", rc.PublishTimeout.String(),
		"poll_interval", rc.PollInterval.String(), "max_attempts", rc.Retry.MaxAttempts, "wakeup", mode.String(), "ordering", *ordering, "delete_published", *deletePublished)
	stop := context.AfterFunc(ctx, func() {
		logger.Info("shutting down: no new claims; in-flight publishes may finish", "shutdown_timeout", max(rc.ShutdownTimeout, 0).String())
	})
	defer stop()
	if err := relay.Run(ctx); err != nil {
		return err
	}
	logger.Info("relay stopped")
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
