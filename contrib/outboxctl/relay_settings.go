package main

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// Defaults of the relay service's own settings.
const (
	// defaultHTTPAddr serves /metrics, /healthz and /readyz on every
	// interface: probes and Prometheus reach a pod on its own address, not
	// on loopback. 9464 is the port OpenTelemetry's Prometheus exporter
	// uses by convention.
	defaultHTTPAddr = ":9464"
	// defaultDiscoverInterval is how often --schemas '*' looks for schemas
	// that gained or lost the outbox table.
	defaultDiscoverInterval = time.Minute
	// defaultStatsInterval is how often the throughput line is logged.
	defaultStatsInterval = time.Minute
	// maxAutoConns caps a database's pool when --max-conns is not given.
	maxAutoConns = 20
)

// relaySettings are everything `outboxctl relay` takes: the relay's
// tuning (core.RelayConfig), the transport, the tenants and the service
// around them. Flags, environment variables and the --config file all
// land here.
type relaySettings struct {
	cfg core.RelayConfig
	tf  transportFlags
	lf  logFlags

	noNotify        bool
	wakeup          string
	wakeupURL       string
	deletePublished bool
	ordering        bool
	drain           bool

	// schemas is --schemas: "a,b,c", or "*" for every schema holding the
	// table; empty means the global --schema.
	schemas          string
	maxConns         int
	wait             time.Duration
	discoverInterval time.Duration
	statsInterval    time.Duration

	httpAddr string
	// httpAddrGiven says --http-addr came from a flag, the environment or
	// the file: a busy address is then an error, while a busy default only
	// costs that relay its endpoints (two relays on one host, say).
	httpAddrGiven bool
	pprof         bool

	// Retention (postgres.Retention), one per tenant; 0 keeps everything.
	retainPublished   time.Duration
	retainProcessed   time.Duration
	retentionInterval time.Duration
	retentionLease    time.Duration
	// vacuumInterval is the leader's VACUUM of the partitions; 0 turns it
	// off.
	vacuumInterval time.Duration

	configFile  string
	printConfig bool
	// databases are the config file's further databases.
	databases []databaseSpec

	// mode is --wakeup parsed.
	mode postgres.WakeupMode
}

func (s *relaySettings) register(fs *flagSet, getenv func(string) string) {
	s.tf.register(fs, getenv)
	def := core.RelayConfig{}.WithDefaults()
	cfg := &s.cfg
	fs.IntVar(&cfg.BatchSize, "batch-size", def.BatchSize, "most events claimed and published at once")
	fs.IntVar(&cfg.Concurrency, "concurrency", def.Concurrency, "batches in flight at once, per tenant")
	newDurationFlag(fs, &cfg.LeaseDuration, "lease", def.LeaseDuration, "how long a claim keeps other relays off its events; must exceed --publish-timeout")
	newDurationFlag(fs, &cfg.PublishTimeout, "publish-timeout", 0, "bound on one publish call (default 10s, or half of --lease when that is shorter)")
	newDurationFlag(fs, &cfg.PollInterval, "poll-interval", def.PollInterval, "idle wait between looks for due events when no notification arrives")
	newDurationFlag(fs, &cfg.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "on SIGINT/SIGTERM, how long in-flight publishes may finish before they are cancelled and their events released; 0s cancels them at once")
	fs.IntVar(&cfg.Retry.MaxAttempts, "max-attempts", def.Retry.MaxAttempts, "attempts after which a failing event is dead-lettered")
	newDurationFlag(fs, &cfg.Retry.InitialBackoff, "initial-backoff", def.Retry.InitialBackoff, "delay after the first failed attempt; it doubles per attempt, with jitter")
	newDurationFlag(fs, &cfg.Retry.MaxBackoff, "max-backoff", def.Retry.MaxBackoff, "cap on the delay between attempts")
	fs.BoolVar(&s.noNotify, "no-notify", false, "open no wake-up connection and find events by polling alone (the same as --wakeup poll)")
	fs.StringVar(&s.wakeup, "wakeup", envOr(getenv, "OUTBOX_WAKEUP", "auto"), "how the relay learns of new events at once: `auto` (a WAL stream where the server allows logical replication, else LISTEN, said once in the log), listen, or poll (env OUTBOX_WAKEUP)")
	fs.StringVar(&s.wakeupURL, "wakeup-url", getenv("OUTBOX_WAKEUP_URL"), "connection `URL` of the wake-up connection when --database-url goes through PgBouncer: PostgreSQL itself (env OUTBOX_WAKEUP_URL)")
	fs.BoolVar(&s.deletePublished, "delete-published", false, "delete each row once published instead of keeping it for prune: faster, but published events can be neither inspected nor replayed")
	fs.BoolVar(&s.ordering, "ordering", false, "per-aggregate ordering: claim only each aggregate's oldest pending event (writers and relays of one table must agree)")
	fs.StringVar(&cfg.Destination, "only-destination", "", "claim only events whose destination column equals this `value` (a relay dedicated to one slow destination)")
	fs.BoolVar(&s.drain, "drain", false, "process every due event once, then exit")

	fs.StringVar(&s.schemas, "schemas", getenv("OUTBOX_SCHEMAS"), "relay several schemas of --database-url at once: `list` a,b,c, or '*' for every schema holding the outbox table, looked for again every --discover-interval; each is a tenant with its own relay (env OUTBOX_SCHEMAS; default: --schema)")
	fs.IntVar(&s.maxConns, "max-conns", 0, "connections of each database's pool, shared by its tenants (default: (concurrency+1) per tenant + 1, at most 20, and at least concurrency+2; a pool_max_conns in the URL wins)")
	newDurationFlag(fs, &s.wait, "wait", 0, "at start, retry PostgreSQL, the migrations and the transport for up to this long instead of exiting (/readyz says what it waits for)")
	newDurationFlag(fs, &s.discoverInterval, "discover-interval", defaultDiscoverInterval, "with --schemas '*', how often to look for schemas that gained or lost the outbox table")
	newDurationFlag(fs, &s.statsInterval, "log-stats-interval", defaultStatsInterval, "how often to log the events published, failed and dead-lettered per tenant; 0s turns the line off")
	fs.StringVar(&s.httpAddr, "http-addr", envOr(getenv, "OUTBOX_HTTP_ADDR", defaultHTTPAddr), "`address` serving /metrics, /healthz and /readyz; \"\" turns the server off (env OUTBOX_HTTP_ADDR)")
	fs.BoolVar(&s.pprof, "pprof", false, "also serve Go's profiler under /debug/pprof/ on --http-addr (keep that address private)")
	newDurationFlag(fs, &s.retainPublished, "retain-published", postgres.DefaultRetainPublished, "delete published events older than this, in bounded batches, from one relay per table at a time (a leader elected through the database); 0s keeps every published event")
	newDurationFlag(fs, &s.retainProcessed, "retain-processed", postgres.DefaultRetainProcessed, "delete processed-event records (<table>_processed) older than this; keep them longer than published events and than any transport redelivers; 0s keeps them all")
	newDurationFlag(fs, &s.retentionInterval, "retention-interval", postgres.DefaultRetentionInterval, "time between two retention passes of the leader")
	newDurationFlag(fs, &s.vacuumInterval, "vacuum-interval", postgres.DefaultVacuumInterval, "on a partitioned table, how often the retention leader vacuums the partitions whose dead rows call for it (each settled event leaves one); 0s leaves them to autovacuum")
	newDurationFlag(fs, &s.retentionLease, "retention-lease", postgres.DefaultRetentionLease, "how long the retention leader's lease lasts unrenewed: when its relay dies, another takes over within it")
	fs.StringVar(&s.configFile, "config", getenv("OUTBOXCTL_CONFIG"), "YAML `file` of settings: keys are these flags' names, plus databases (env OUTBOXCTL_CONFIG); flags and environment variables win over it")
	fs.BoolVar(&s.printConfig, "print-config", false, "print the effective configuration as a --config file, secrets redacted, and exit")
	s.lf.register(fs)
}

// checkServiceFlags checks the service's own settings without any I/O.
func (s *relaySettings) checkServiceFlags() error {
	if s.maxConns < 0 {
		return usageError(fmt.Sprintf("--max-conns is %d: give a positive number, or leave it out for the default", s.maxConns))
	}
	if s.discoverInterval <= 0 {
		return usageError("--discover-interval must be positive")
	}
	if s.httpAddr != "" {
		if _, _, err := net.SplitHostPort(s.httpAddr); err != nil {
			return usageError(fmt.Sprintf("--http-addr %q is not host:port (e.g. :9464 or 127.0.0.1:9464): %v; \"\" turns the server off", s.httpAddr, err))
		}
	}
	if s.retentionInterval <= 0 {
		return usageError("--retention-interval must be positive")
	}
	if s.retentionLease < postgres.MinRetentionLease {
		return usageError(fmt.Sprintf("--retention-lease %s is shorter than %s", formatDuration(s.retentionLease), postgres.MinRetentionLease))
	}
	if s.pprof && s.httpAddr == "" {
		return usageError("--pprof needs --http-addr: the profiler is served there")
	}
	return nil
}

// storeConfig is the postgres.Config of one tenant's store. The relay
// writes no events, so Notify does not matter; Wakeup decides its
// wake-up connection.
func (s *relaySettings) storeConfig(db databaseSpec, schema string, logger *slog.Logger) *postgres.Config {
	return &postgres.Config{
		Schema: schema, Table: db.Table,
		Ordering: s.ordering, DeletePublished: s.deletePublished,
		Wakeup: s.mode, WakeupURL: db.WakeupURL, Logger: logger,
	}
}

// retentionConfig is the postgres.RetentionConfig of one tenant, nil when
// it keeps everything.
func (s *relaySettings) retentionConfig(db databaseSpec, schema string, logger *slog.Logger) *postgres.RetentionConfig {
	keep := func(d time.Duration) time.Duration {
		if d == 0 {
			return postgres.RetainForever
		}
		return d
	}
	if s.retainPublished == 0 && s.retainProcessed == 0 {
		return nil
	}
	vacuum := s.vacuumInterval
	if vacuum == 0 {
		vacuum = -1 // off: the library reads 0 as its default
	}
	return &postgres.RetentionConfig{
		Schema: schema, Table: db.Table,
		RetainPublished: keep(s.retainPublished), RetainProcessed: keep(s.retainProcessed),
		Interval: s.retentionInterval, LeaseDuration: s.retentionLease, VacuumInterval: vacuum, Logger: logger,
	}
}

// databaseSpec is one database the relay serves: the global flags' (the
// primary one) or an entry of the config file's databases.
type databaseSpec struct {
	// Name labels the database in metrics, logs and /readyz; defaults to
	// host:port/dbname of its URL, which carries no credentials.
	Name      string
	URL       string
	WakeupURL string
	// Schemas are the tenants' schemas, or ["*"] for discovery.
	Schemas  []string
	Table    string
	MaxConns int
	// primary is the database of --database-url (its errors name that
	// flag, and without a URL it is the local development database).
	primary bool
}

// discover reports whether the database's schemas are found rather than
// listed.
func (d databaseSpec) discover() bool { return len(d.Schemas) == 1 && d.Schemas[0] == "*" }

func (d databaseSpec) firstSchema() string {
	if len(d.Schemas) == 0 || d.discover() {
		return "public"
	}
	return d.Schemas[0]
}

// poolSize is the fair-share rule of connections (docs/OPERATIONS.md):
// tenants of one database share its pool, each worker holding a
// connection only while a statement runs, and pgxpool serving waiting
// statements first come, first served. Per tenant the pool holds one
// connection per worker plus one for its metrics and readiness checks;
// past maxAutoConns tenants take turns. --max-conns (or the entry's
// max-conns) replaces the rule.
func (d databaseSpec) poolSize(s *relaySettings) int32 {
	if n := d.MaxConns; n > 0 {
		return int32(n)
	}
	if s.maxConns > 0 {
		return int32(s.maxConns)
	}
	c := s.cfg.Concurrency
	if c < 1 {
		c = core.RelayConfig{}.WithDefaults().Concurrency
	}
	tenants := len(d.Schemas)
	n := maxAutoConns
	if !d.discover() {
		n = min(maxAutoConns, tenants*(c+1)+1)
	}
	return int32(max(n, c+2))
}

// poolSizeExact says the pool size was given and must not be raised by
// the URL's pool_max_conns.
func (d databaseSpec) poolSizeExact(s *relaySettings) bool { return d.MaxConns > 0 || s.maxConns > 0 }

// splitSchemas reads --schemas.
func splitSchemas(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// databaseSpecs resolves the databases and their tenants from the global
// flags, --schemas and the config file. The primary database (the global
// flags') is served unless the config file lists databases and no
// --database-url, DATABASE_URL or database-url key gave one.
func (a *app) databaseSpecs(s *relaySettings) ([]databaseSpec, error) {
	var out []databaseSpec
	if a.g.databaseURL != "" || len(s.databases) == 0 {
		if a.g.databaseURL == "" {
			a.g.databaseURL = localDatabaseURL
			a.warn("neither --database-url nor DATABASE_URL is set: using the local development database %s", localDatabaseURL)
		}
		schemas := splitSchemas(s.schemas)
		if len(schemas) == 0 {
			schemas = []string{a.g.schema}
		}
		out = append(out, databaseSpec{URL: a.g.databaseURL, WakeupURL: s.wakeupURL, Schemas: schemas, Table: a.g.table, primary: true})
	}
	for _, d := range s.databases {
		if d.Table == "" {
			d.Table = a.g.table
		}
		if len(d.Schemas) == 0 {
			d.Schemas = []string{a.g.schema}
		}
		out = append(out, d)
	}
	seen := map[string]bool{}
	for i := range out {
		d := &out[i]
		a.addURLSecrets(d.URL)
		a.addURLSecrets(d.WakeupURL)
		if len(d.Schemas) > 1 && slices.Contains(d.Schemas, "*") {
			return nil, usageError("schemas: '*' stands alone (every schema holding the table); do not mix it with names")
		}
		for _, sc := range d.Schemas {
			if strings.Contains(sc, "*") && sc != "*" {
				return nil, usageError(fmt.Sprintf("schemas: %q: patterns are not supported, only '*' alone", sc))
			}
		}
		if d.Name == "" {
			d.Name = databaseLabel(d.URL)
		}
		key := d.Name + "\x00" + d.Table
		if seen[key] {
			return nil, usageError(fmt.Sprintf("database %s (table %s) is listed twice: give each database once, with all its schemas", d.Name, d.Table))
		}
		seen[key] = true
	}
	return out, nil
}
