package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outboxkit/outboxkit/core"
)

// How often the service looks at its dependencies. The database ping is
// what turns /readyz to 503 within a few seconds of PostgreSQL going away;
// the schema check and the transport probe cost more and change less.
const (
	pingInterval      = time.Second
	checkTimeout      = 2 * time.Second
	tenantCheckEvery  = 5 * time.Second
	transportProbeDue = 10 * time.Second
	transportTimeout  = 5 * time.Second
)

// errStopped ends the start-up when SIGINT or SIGTERM arrives while it
// waits for a dependency: nothing failed.
var errStopped = errors.New("stopped while starting")

// service is `outboxctl relay` as a long-running process: its databases
// and their tenants (one relay per schema and table), the transport they
// share, and what /readyz and /metrics report about them.
type service struct {
	a   *app
	s   *relaySettings
	log *slog.Logger
	tel *telemetry

	pub   core.Publisher
	probe func(context.Context) error

	// mu guards everything below and the databases' tenant maps. Lock
	// order: service.mu, then database.mu, then tenant.mu.
	mu         sync.Mutex
	phase      string // starting, running, stopping
	waitingFor string // what the start-up waits for; "" when nothing
	dbs        []*database
	transport  depState

	// closers release the transport once the relays stopped.
	closers []func()

	tenantWG sync.WaitGroup
	failures metric.Int64Counter

	// httpAddr is where the HTTP server listens; announce logs it once,
	// when the service starts waiting or running: an error at start stays
	// the one line it is for every command.
	httpAddr string
	announce sync.Once
}

// depState is what the service knows of a dependency.
type depState struct {
	checked bool
	up      bool
	err     string
	since   time.Time // when up last changed
}

// database is one database the service serves, its pool shared by its
// tenants.
type database struct {
	spec databaseSpec
	pool *pgxpool.Pool

	mu  sync.Mutex
	dep depState

	tenants map[string]*tenant // by schema; guarded by service.mu
}

func (d *database) up() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.dep.checked || d.dep.up, d.dep.err
}

// serveRelay runs the relay service until ctx ends.
func (a *app) serveRelay(ctx context.Context, s *relaySettings, specs []databaseSpec, connect connector, logger *slog.Logger) error {
	tel, err := newTelemetry(ctx, a.getenv, logger, true)
	if err != nil {
		return err
	}
	defer tel.shutdown(logger)
	svc := &service{a: a, s: s, log: logger, tel: tel, phase: "starting"}
	for _, spec := range specs {
		svc.dbs = append(svc.dbs, &database{spec: spec, tenants: map[string]*tenant{}})
	}
	if err := svc.registerMetrics(); err != nil {
		return err
	}
	if s.httpAddr != "" {
		srv, err := svc.listen(s.httpAddr)
		switch {
		case err != nil && !s.httpAddrGiven:
			a.warn("%v; this relay serves no endpoints", err)
		case err != nil:
			return err
		default:
			defer srv.close()
		}
	}
	defer func() {
		for _, db := range svc.dbs {
			if db.pool != nil {
				db.pool.Close()
			}
		}
	}()
	// Stop every tenant before the pools close, whatever ends the run.
	defer svc.tenantWG.Wait()

	err = svc.start(ctx, connect)
	if errors.Is(err, errStopped) {
		logger.Info("relay stopped before it started")
		return nil
	}
	if err != nil {
		return err
	}
	defer svc.closePub()

	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		svc.watch(ctx)
	}()
	<-ctx.Done()
	svc.setPhase("stopping")
	logger.Info("shutting down: no new claims; in-flight publishes may finish", "shutdown_timeout", max(s.cfg.ShutdownTimeout, 0).String())
	watchWG.Wait()
	svc.tenantWG.Wait()
	logger.Info("relay stopped")
	return nil
}

// start connects to every database, finds and checks its tenants, connects
// to the transport, then starts the tenants' relays. With --wait each step
// is retried until it succeeds or the wait is over.
func (svc *service) start(ctx context.Context, connect connector) error {
	type planned struct {
		db      *database
		schemas []string
	}
	var plan []planned
	for _, db := range svc.dbs {
		spec := db.spec
		err := svc.waitFor(ctx, "PostgreSQL at "+spec.Name, func(ctx context.Context) error {
			pool, err := svc.a.connectURL(ctx, spec.URL, spec.poolSize(svc.s), spec.poolSizeExact(svc.s))
			if err != nil {
				return svc.a.dbErrorAt(err, spec.URL, spec.firstSchema(), spec.Table)
			}
			db.pool = pool
			return nil
		})
		if err != nil {
			return err
		}
		db.setUp(true, "")
		var schemas []string
		err = svc.waitFor(ctx, "the schemas of "+spec.Name, func(ctx context.Context) error {
			var err error
			schemas, err = svc.a.tenantSchemas(ctx, db.pool, spec)
			return err
		})
		if err != nil {
			return err
		}
		for _, schema := range schemas {
			what := fmt.Sprintf("the migrations of schema %s (table %s) at %s", schema, spec.Table, spec.Name)
			err := svc.waitFor(ctx, what, func(ctx context.Context) error {
				return svc.a.checkTenantMigrated(ctx, db.pool, spec.URL, schema, spec.Table)
			})
			if err != nil {
				return err
			}
		}
		plan = append(plan, planned{db, schemas})
	}
	var closePub func()
	err := svc.waitFor(ctx, "the transport ("+strings.ToLower(svc.s.tf.kind)+")", func(ctx context.Context) error {
		pub, probe, c, err := connect(ctx)
		if err != nil {
			return err
		}
		svc.pub, svc.probe, closePub = pub, probe, c
		return nil
	})
	if err != nil {
		return err
	}
	svc.mu.Lock()
	svc.transport = depState{checked: true, up: true, since: time.Now()}
	svc.closers = append(svc.closers, closePub)
	svc.mu.Unlock()

	n := 0
	for _, p := range plan {
		for _, schema := range p.schemas {
			svc.startTenant(ctx, p.db, schema)
			n++
		}
	}
	rc := svc.s.cfg.WithDefaults()
	attrs := []any{"transport", strings.ToLower(svc.s.tf.kind), "tenants", n}
	if len(svc.dbs) == 1 && len(plan[0].schemas) == 1 {
		attrs = append(attrs, "database", displayURL(svc.dbs[0].spec.URL), "schema", plan[0].schemas[0], "table", svc.dbs[0].spec.Table)
	} else {
		attrs = append(attrs, "databases", len(svc.dbs))
	}
	attrs = append(attrs, "batch_size", rc.BatchSize, "concurrency", rc.Concurrency, "lease", rc.LeaseDuration.String(), "publish_timeout", rc.PublishTimeout.String(),
		"poll_interval", rc.PollInterval.String(), "max_attempts", rc.Retry.MaxAttempts, "wakeup", svc.s.mode.String(), "ordering", svc.s.ordering,
		"delete_published", svc.s.deletePublished, "otlp_traces", svc.tel.traces, "otlp_metrics", svc.tel.metrics)
	svc.announceHTTP()
	svc.log.Info("relay started", attrs...)
	svc.setPhase("running")
	return nil
}

// closePub closes the transport once every relay has stopped.
func (svc *service) closePub() {
	svc.tenantWG.Wait()
	svc.mu.Lock()
	closers := svc.closers
	svc.closers = nil
	svc.mu.Unlock()
	for _, c := range closers {
		c()
	}
}

// waitFor runs f until it succeeds. Without --wait it runs once; with it,
// failures are retried with a capped backoff until the wait is over, and
// /readyz says what the service waits for. Usage errors and fatalErrors
// (a refused token) are not retried: waiting cannot cure them.
func (svc *service) waitFor(ctx context.Context, what string, f func(context.Context) error) error {
	wait := svc.s.wait
	began := time.Now()
	deadline := began.Add(wait)
	b := backoff{min: 250 * time.Millisecond, max: 10 * time.Second}
	failed := false
	for {
		err := f(ctx)
		if err == nil {
			svc.setWaiting("")
			if failed {
				svc.log.Info("dependency available", "what", what, "waited", formatDuration(time.Since(began)))
			}
			return nil
		}
		if ctx.Err() != nil {
			return errStopped
		}
		var ue usageError
		var fe fatalError
		if wait <= 0 || errors.As(err, &ue) || errors.As(err, &fe) {
			return err
		}
		d := b.next()
		if time.Now().Add(d).After(deadline) {
			return fmt.Errorf("%w (still failing after --wait %s)", err, formatDuration(wait))
		}
		failed = true
		svc.announceHTTP()
		svc.setWaiting("waiting for " + what + ": " + svc.a.redact(oneLine(err.Error())))
		svc.log.Warn("waiting for "+what, "error", err, "retry_in", formatDuration(d), "waited", formatDuration(time.Since(began)))
		if !sleepCtx(ctx, d) {
			return errStopped
		}
	}
}

func (svc *service) setWaiting(s string) {
	svc.mu.Lock()
	svc.waitingFor = s
	svc.mu.Unlock()
}

func (svc *service) setPhase(p string) {
	svc.mu.Lock()
	svc.phase = p
	svc.mu.Unlock()
}

// startTenant starts the relay of one schema of db.
func (svc *service) startTenant(ctx context.Context, db *database, schema string) {
	t := newTenant(svc, db, schema)
	tctx, cancel := context.WithCancel(ctx)
	t.remove = cancel
	svc.mu.Lock()
	db.tenants[schema] = t
	svc.mu.Unlock()
	svc.tenantWG.Add(1)
	go func() {
		defer svc.tenantWG.Done()
		defer cancel()
		t.run(tctx)
	}()
}

// tenants returns every tenant, in a stable order.
func (svc *service) tenants() []*tenant {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	var out []*tenant
	for _, db := range svc.dbs {
		for _, t := range db.tenants {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].db.spec.Name != out[j].db.spec.Name {
			return out[i].db.spec.Name < out[j].db.spec.Name
		}
		return out[i].schema < out[j].schema
	})
	return out
}

// watch is the service's housekeeping until ctx ends: pings, schema
// checks, transport probes, schema discovery and the throughput line.
func (svc *service) watch(ctx context.Context) {
	tick := time.NewTicker(pingInterval)
	defer tick.Stop()
	now := time.Now()
	lastCheck, lastProbe, lastDiscover, lastStats := now, now, now, now
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, db := range svc.dbs {
			svc.ping(ctx, db)
		}
		if now.Sub(lastCheck) >= tenantCheckEvery {
			lastCheck = now
			for _, t := range svc.tenants() {
				if up, _ := t.db.up(); up {
					t.periodicCheck(ctx)
					t.maybeDoctor(ctx, now)
					t.maybeListPartitions(ctx, now)
				}
			}
		}
		if now.Sub(lastProbe) >= transportProbeDue {
			lastProbe = now
			svc.probeTransport(ctx)
		}
		if now.Sub(lastDiscover) >= svc.s.discoverInterval {
			lastDiscover = now
			for _, db := range svc.dbs {
				if db.spec.discover() {
					svc.discover(ctx, db)
				}
			}
		}
		if svc.s.statsInterval > 0 && now.Sub(lastStats) >= svc.s.statsInterval {
			svc.logThroughput(now.Sub(lastStats))
			lastStats = now
		}
	}
}

// ping checks that db answers and logs when that changes.
func (svc *service) ping(ctx context.Context, db *database) {
	pctx, cancel := context.WithTimeout(ctx, checkTimeout)
	err := db.pool.Ping(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	msg := ""
	if err != nil {
		msg = svc.a.redact(oneLine(svc.a.dbErrorAt(err, db.spec.URL, db.spec.firstSchema(), db.spec.Table).Error()))
	}
	was, since := db.setUp(err == nil, msg)
	switch {
	case was && err != nil:
		svc.log.Warn("PostgreSQL unreachable", "database", db.spec.Name, "error", msg)
	case !was && err == nil:
		svc.log.Info("PostgreSQL reachable again", "database", db.spec.Name, "down_for", formatDuration(time.Since(since)))
	}
}

// setUp records db's state; it returns the previous one and since when it
// held.
func (d *database) setUp(up bool, msg string) (was bool, since time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	was, since = !d.dep.checked || d.dep.up, d.dep.since
	if !d.dep.checked || d.dep.up != up {
		d.dep.since = time.Now()
	}
	d.dep.checked, d.dep.up, d.dep.err = true, up, msg
	return was, since
}

// probeTransport checks the transport and logs when that changes.
func (svc *service) probeTransport(ctx context.Context) {
	if svc.probe == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, transportTimeout)
	err := svc.probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	svc.mu.Lock()
	was, since := svc.transport.up, svc.transport.since
	if was != (err == nil) {
		svc.transport.since = time.Now()
	}
	svc.transport.up = err == nil
	svc.transport.err = ""
	if err != nil {
		svc.transport.err = svc.a.redact(oneLine(err.Error()))
	}
	svc.mu.Unlock()
	switch {
	case was && err != nil:
		svc.log.Warn("transport unreachable", "transport", strings.ToLower(svc.s.tf.kind), "error", err)
	case !was && err == nil:
		svc.log.Info("transport reachable again", "transport", strings.ToLower(svc.s.tf.kind), "down_for", formatDuration(time.Since(since)))
	}
}

// discover starts tenants for schemas that gained the table and stops
// those whose schema lost it (--schemas '*').
func (svc *service) discover(ctx context.Context, db *database) {
	dctx, cancel := context.WithTimeout(ctx, checkTimeout)
	found, err := discoverSchemas(dctx, db.pool, db.spec.Table)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			svc.log.Warn("could not look for schemas holding the outbox table", "database", db.spec.Name, "table", db.spec.Table, "error", err)
		}
		return
	}
	have := map[string]bool{}
	for _, s := range found {
		have[s] = true
	}
	svc.mu.Lock()
	var gone []*tenant
	for schema, t := range db.tenants {
		if !have[schema] {
			gone = append(gone, t)
			delete(db.tenants, schema)
		}
	}
	var added []string
	for _, s := range found {
		if db.tenants[s] == nil {
			added = append(added, s)
		}
	}
	svc.mu.Unlock()
	for _, t := range gone {
		t.log.Info("tenant removed: its schema no longer holds the outbox table")
		t.remove()
	}
	for _, s := range added {
		svc.log.Info("tenant found", "database", db.spec.Name, "schema", s, "table", db.spec.Table)
		svc.startTenant(ctx, db, s)
	}
}

// registerMetrics registers the service's own instruments:
// outboxctl.tenant.ready, outboxctl.database.up, outboxctl.transport.up,
// outboxctl.ready, outboxctl.tenant.failures, the retention's
// (outboxctl.retention.*) and outboxctl.partitions.ahead.
func (svc *service) registerMetrics() error {
	m := svc.tel.meter()
	tenantReady, err1 := m.Int64ObservableGauge("outboxctl.tenant.ready",
		metric.WithDescription("1 when the tenant's relay runs and is ready (see /readyz), 0 while it is failing, waiting or starting."))
	dbUp, err2 := m.Int64ObservableGauge("outboxctl.database.up",
		metric.WithDescription("1 when the database answered the last ping (every second), 0 otherwise."))
	trUp, err3 := m.Int64ObservableGauge("outboxctl.transport.up",
		metric.WithDescription("1 when the transport answered the last probe, 0 otherwise."))
	ready, err4 := m.Int64ObservableGauge("outboxctl.ready",
		metric.WithDescription("1 when /readyz answers 200, 0 otherwise."))
	failures, err5 := m.Int64Counter("outboxctl.tenant.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Times a tenant's relay stopped or could not start (schema missing or out of date, database unreachable at start), each followed by a retry with backoff."))
	leader, err6 := m.Int64ObservableGauge("outboxctl.retention.leader",
		metric.WithDescription("1 while this process's retention holds the tenant's lease and prunes, 0 while another relay's does."))
	deleted, err7 := m.Int64ObservableCounter("outboxctl.retention.deleted", metric.WithUnit("{row}"),
		metric.WithDescription("Rows this process's retention deleted, by kind: published (events) or processed (processed-event records)."))
	backlog, err8 := m.Float64ObservableGauge("outboxctl.retention.backlog", metric.WithUnit("s"),
		metric.WithDescription("How far the oldest row of each kind was beyond its retention at the leader's last pass (0: none due); growing means retention falls behind. Reported by the leader only."))
	lastPass, err9 := m.Float64ObservableGauge("outboxctl.retention.last_pass.timestamp", metric.WithUnit("s"),
		metric.WithDescription("When this process's retention last ended a pass, in seconds since the Unix epoch; absent before the first."))
	passes, err10 := m.Int64ObservableCounter("outboxctl.retention.passes", metric.WithUnit("{pass}"),
		metric.WithDescription("Retention passes this process ran, by result: ok or failed."))
	partsCreated, err11 := m.Int64ObservableCounter("outboxctl.retention.partitions.created", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions of the outbox and processed tables this process's retention created as leader (partitioned layout only): the periods ahead, as time moves on."))
	partsDropped, err12 := m.Int64ObservableCounter("outboxctl.retention.partitions.dropped", metric.WithUnit("{partition}"),
		metric.WithDescription("Retired partitions this process's retention dropped as leader (partitioned layout only), instead of deleting their rows."))
	deadMoved, err13 := m.Int64ObservableCounter("outboxctl.retention.dead_letters_moved", metric.WithUnit("{event}"),
		metric.WithDescription("Dead-lettered events this process's retention moved out of partitions it dropped into the default partition, IDs kept, so they stay replayable (partitioned layout only)."))
	ahead, err14 := m.Float64ObservableGauge("outboxctl.partitions.ahead", metric.WithUnit("s"),
		metric.WithDescription("How long until the newest period partition of the outbox or processed table ends, whichever is sooner (partitioned layout only, listed every 30s); negative when rows already go to the default partition for want of one."))
	vacuums, err15 := m.Int64ObservableCounter("outboxctl.retention.vacuums", metric.WithUnit("{vacuum}"),
		metric.WithDescription("Partitions of the outbox table this process's retention vacuumed as leader, between its passes, for the dead rows settled events leave (partitioned layout only; --vacuum-interval)."))
	vacuumTime, err16 := m.Float64ObservableCounter("outboxctl.retention.vacuum.time", metric.WithUnit("s"),
		metric.WithDescription("Seconds this process's retention spent vacuuming partitions as leader, the check for dead rows included (partitioned layout only; --vacuum-interval). Its rate is the share of a connection the VACUUMs take."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9, err10, err11, err12, err13, err14, err15, err16); err != nil {
		return fmt.Errorf("create the relay's metrics: %v", err)
	}
	svc.failures = failures
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		rep := svc.readiness()
		o.ObserveInt64(ready, boolInt(rep.Ready))
		if rep.Transport != nil {
			o.ObserveInt64(trUp, boolInt(rep.Transport.Up), metric.WithAttributes(attribute.String("transport", rep.Transport.Name)))
		}
		for _, d := range rep.Databases {
			o.ObserveInt64(dbUp, boolInt(d.Up), metric.WithAttributes(attribute.String("database", d.Database)))
		}
		for _, t := range rep.Tenants {
			o.ObserveInt64(tenantReady, boolInt(t.Ready), metric.WithAttributes(tenantAttrs(t.Database, t.Schema, t.Table)...))
		}
		now := time.Now()
		for _, t := range svc.tenants() {
			t.mu.Lock()
			r := t.retention
			t.mu.Unlock()
			with := func(extra ...attribute.KeyValue) metric.ObserveOption {
				return metric.WithAttributes(append(append([]attribute.KeyValue{}, t.attrs...), extra...)...)
			}
			partitioned, until := t.partitioned()
			if partitioned && !until.IsZero() {
				o.ObserveFloat64(ahead, until.Sub(now).Seconds(), with())
			}
			if r == nil {
				continue
			}
			st := r.Stats()
			// On the plain layout these stay 0: they are left out there
			// rather than served as three more series per tenant.
			if partitioned || st.PartitionsCreated+st.PartitionsDropped+st.DeadLettersMoved+st.Vacuums > 0 {
				o.ObserveInt64(partsCreated, st.PartitionsCreated, with())
				o.ObserveInt64(partsDropped, st.PartitionsDropped, with())
				o.ObserveInt64(deadMoved, st.DeadLettersMoved, with())
				o.ObserveInt64(vacuums, st.Vacuums, with())
				o.ObserveFloat64(vacuumTime, st.VacuumTime.Seconds(), with())
			}
			published, processed := attribute.String("kind", "published"), attribute.String("kind", "processed")
			o.ObserveInt64(leader, boolInt(st.Leader), with())
			o.ObserveInt64(deleted, st.PublishedDeleted, with(published))
			o.ObserveInt64(deleted, st.ProcessedDeleted, with(processed))
			o.ObserveInt64(passes, st.Passes, with(attribute.String("result", "ok")))
			o.ObserveInt64(passes, st.FailedPasses, with(attribute.String("result", "failed")))
			if st.Leader && !st.BacklogMeasuredAt.IsZero() {
				o.ObserveFloat64(backlog, st.PublishedBacklog.Seconds(), with(published))
				o.ObserveFloat64(backlog, st.ProcessedBacklog.Seconds(), with(processed))
			}
			if !st.LastPassAt.IsZero() {
				o.ObserveFloat64(lastPass, float64(st.LastPassAt.UnixNano())/1e9, with())
			}
		}
		return nil
	}, tenantReady, dbUp, trUp, ready, leader, deleted, backlog, lastPass, passes, partsCreated, partsDropped, deadMoved, vacuums, vacuumTime, ahead)
	if err != nil {
		return fmt.Errorf("register the relay's metrics: %v", err)
	}
	return nil
}

// tenantAttrs are the labels of a tenant's metrics.
func tenantAttrs(database, schema, table string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("database", database), attribute.String("schema", schema), attribute.String("table", table)}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// logThroughput writes the periodic throughput line: one per tenant that
// did anything in the interval, and one summing up the process.
func (svc *service) logThroughput(interval time.Duration) {
	var published, failed, dead, deferred int64
	ts := svc.tenants()
	ready := 0
	rep := svc.readiness()
	for _, t := range rep.Tenants {
		if t.Ready {
			ready++
		}
	}
	for _, t := range ts {
		p, f, d, df := t.takeCounts()
		published, failed, dead, deferred = published+p, failed+f, dead+d, deferred+df
		if p+f+d+df > 0 {
			t.log.Info("tenant throughput", "published", p, "failed", f, "dead_lettered", d, "deferred", df, "interval", formatDuration(interval))
		}
	}
	svc.log.Info("relay throughput", "tenants", len(ts), "ready", ready, "published", published, "failed", failed,
		"dead_lettered", dead, "deferred", deferred, "interval", formatDuration(interval))
}

// announceHTTP logs where the endpoints are, once.
func (svc *service) announceHTTP() {
	svc.announce.Do(func() {
		if svc.httpAddr != "" {
			svc.log.Info("serving /metrics, /healthz and /readyz", "addr", svc.httpAddr, "pprof", svc.s.pprof)
		}
	})
}

// listen starts the HTTP server; a busy address is an error at start.
func (svc *service) listen(addr string) (*httpServer, error) {
	srv, err := newHTTPServer(addr, svc.handler(), svc.log)
	if err != nil {
		return nil, usageError(fmt.Sprintf("--http-addr %s: %s: give each relay on a host an address of its own, or --http-addr \"\" to turn the server off", addr, netCause(err)))
	}
	svc.httpAddr = srv.addr
	return srv, nil
}
