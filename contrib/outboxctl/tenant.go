package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
	"github.com/outboxkit/outboxkit/tracing"
)

// Tenant states, as /readyz shows them.
const (
	tenantStarting = "starting"
	tenantRunning  = "running"
	tenantFailed   = "failed"
	tenantStopped  = "stopped"
)

// errDatabaseDown answers a metrics scrape's Stats at once while the
// tenant's database does not answer its pings, so a scrape does not wait
// out a timeout per tenant.
var errDatabaseDown = errors.New("the database does not answer its pings")

// tenant is one outbox (schema and table of a database) and its relay. A
// tenant that fails (its table dropped, its migrations reverted) stops its
// relay, says so (log, /readyz, outboxctl_tenant_failures_total) and
// retries with a capped backoff; the other tenants go on.
type tenant struct {
	svc           *service
	db            *database
	schema, table string
	log           *slog.Logger
	attrs         []attribute.KeyValue
	hook          core.RelayHook
	// remove stops the tenant for good (its schema lost the table).
	remove context.CancelFunc

	// retention prunes the tenant's table while its relay runs (nil when
	// it keeps everything).
	retention *postgres.Retention

	mu         sync.Mutex
	state      string
	reason     string // why it is failing
	store      *postgres.Store
	stopRun    context.CancelCauseFunc
	runStarted time.Time
	lastClaim  time.Time // last claim that succeeded
	claimErr   error     // last claim's error; nil after a success
	checkErr   error     // last periodic check's error
	failures   int64
	failedAt   time.Time

	// doc holds the doctor's cheap checks (tenant_doctor.go).
	doc doctorState
	// parts is what the last listing of the partitions found
	// (tenant_partitions.go).
	parts partsState

	// Outcomes since the last throughput line.
	published, failed, dead, deferred atomic.Int64
}

func newTenant(svc *service, db *database, schema string) *tenant {
	t := &tenant{
		svc: svc, db: db, schema: schema, table: db.spec.Table,
		attrs: tenantAttrs(db.spec.Name, schema, db.spec.Table),
		state: tenantStarting,
	}
	t.log = svc.log.With("database", db.spec.Name, "schema", schema, "table", db.spec.Table)
	t.hook = tracing.RelayHook(svc.tel.options(&svc.s.tf, t.attrs...)...)
	return t
}

// run runs the tenant's relay until ctx ends, restarting it with backoff
// after each failure.
func (t *tenant) run(ctx context.Context) {
	defer t.setState(tenantStopped, "")
	store, err := postgres.New(t.db.pool, t.svc.s.storeConfig(t.db.spec, t.schema, t.log))
	if err != nil {
		// A discovered schema the store cannot serve (its name is not a
		// plain identifier, say): nothing to retry.
		t.fail(err, 0)
		<-ctx.Done()
		return
	}
	var retention *postgres.Retention
	if rc := t.svc.s.retentionConfig(t.db.spec, t.schema, t.log); rc != nil {
		if retention, err = postgres.NewRetention(t.db.pool, rc); err != nil {
			t.fail(err, 0)
			<-ctx.Done()
			return
		}
	}
	t.mu.Lock()
	t.store, t.retention = store, retention
	t.mu.Unlock()
	obs := &observedStore{Store: store, t: t}
	b := backoff{min: time.Second, max: time.Minute}
	for {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		err := store.Check(cctx)
		cancel()
		if err == nil {
			t.listPartitions(ctx)
			began := time.Now()
			err = t.runRelay(ctx, obs)
			if time.Since(began) > time.Minute {
				b.reset()
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the relay stopped")
		}
		d := b.next()
		t.fail(err, d)
		if !sleepCtx(ctx, d) {
			return
		}
	}
}

// runRelay runs one relay over the tenant's store until ctx ends (nil) or
// the tenant fails (the reason).
func (t *tenant) runRelay(ctx context.Context, obs *observedStore) error {
	svc := t.svc
	cfg := svc.s.cfg
	cfg.Logger = t.log
	cfg.Hooks = []core.RelayHook{batchLogger{t.log}, t.hook, t}
	cfg.Middleware = svc.tel.middleware(&svc.s.tf, t.attrs...)
	relay, err := core.NewRelay(obs, svc.pub, &cfg)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	unregister, err := tracing.RegisterStoreMetrics(statsReader{t}, svc.tel.options(&svc.s.tf, t.attrs...)...)
	if err != nil {
		t.log.Warn("no store metrics for this tenant", "error", err)
	}
	t.running(stop)
	var retentionDone chan struct{}
	if t.retention != nil {
		// Retention runs while the relay does: one leader among the
		// relays sharing the table prunes, the others wait for its lease.
		retentionDone = make(chan struct{})
		go func() {
			defer close(retentionDone)
			if err := t.retention.Run(runCtx); err != nil && runCtx.Err() == nil {
				t.log.Warn("retention did not start", "error", err)
			}
		}()
	}
	err = relay.Run(runCtx)
	stop(nil)
	if retentionDone != nil {
		<-retentionDone
	}
	if unregister != nil {
		_ = unregister()
	}
	t.mu.Lock()
	t.stopRun = nil
	t.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		return err
	}
	return context.Cause(runCtx)
}

// running records that a relay runs, and that the tenant recovered when it
// had failed.
func (t *tenant) running(stop context.CancelCauseFunc) {
	t.mu.Lock()
	recovered := t.state == tenantFailed
	failedFor := time.Since(t.failedAt)
	t.state, t.reason, t.stopRun = tenantRunning, "", stop
	t.runStarted, t.claimErr, t.checkErr = time.Now(), nil, nil
	t.mu.Unlock()
	if recovered {
		t.log.Info("tenant recovered", "failed_for", formatDuration(failedFor))
	}
}

// fail records a failure; retryIn 0 means no retry.
func (t *tenant) fail(err error, retryIn time.Duration) {
	msg := oneLine(t.svc.a.redact(t.explain(err).Error()))
	t.mu.Lock()
	if t.state != tenantFailed {
		t.failedAt = time.Now()
	}
	t.state, t.reason = tenantFailed, msg
	t.failures++
	n := t.failures
	t.mu.Unlock()
	t.svc.failures.Add(context.Background(), 1, metric.WithAttributes(t.attrs...))
	if retryIn > 0 {
		t.log.Error("tenant failed; its relay is stopped and retried, the other tenants go on", "error", msg, "retry_in", formatDuration(retryIn), "failures", n)
	} else {
		t.log.Error("tenant failed and cannot be retried", "error", msg)
	}
}

// explain turns a store error into what to do.
func (t *tenant) explain(err error) error {
	if errors.Is(err, postgres.ErrNotMigrated) {
		return fmt.Errorf("the outbox tables are missing or out of date in schema %q (table %q) at %s: run `outboxctl migrate --schema %s --table %s`",
			t.schema, t.table, t.db.spec.Name, t.schema, t.table)
	}
	return t.svc.a.dbErrorAt(err, t.db.spec.URL, t.schema, t.table)
}

func (t *tenant) setState(state, reason string) {
	t.mu.Lock()
	t.state, t.reason = state, reason
	t.mu.Unlock()
}

// noteClaim follows the relay's claims: the last success is what /readyz
// calls "a claim completed recently", and a claim that finds the table
// gone stops the relay at once instead of failing at every poll.
func (t *tenant) noteClaim(err error) {
	t.mu.Lock()
	if err == nil {
		t.lastClaim, t.claimErr = time.Now(), nil
	} else {
		t.claimErr = err
	}
	stop := t.stopRun
	t.mu.Unlock()
	if err != nil && stop != nil && errors.Is(err, postgres.ErrNotMigrated) {
		stop(err)
	}
}

// periodicCheck checks the schema (tables present, migrations current)
// of a running tenant and stops its relay when the check says it cannot
// work.
func (t *tenant) periodicCheck(ctx context.Context) {
	t.mu.Lock()
	store, stop := t.store, t.stopRun
	t.mu.Unlock()
	if store == nil || stop == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	err := store.Check(cctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	t.checkErr = err
	t.mu.Unlock()
	if errors.Is(err, postgres.ErrNotMigrated) {
		stop(err)
	}
}

// AfterSettle counts outcomes for the throughput line.
func (t *tenant) AfterSettle(_ context.Context, info core.SettleInfo) {
	if info.Err != nil {
		return // not recorded: counted when settled again
	}
	for _, o := range info.Outcomes {
		switch o.Kind {
		case core.Published:
			t.published.Add(1)
		case core.Retry:
			t.failed.Add(1)
		case core.DeadLettered:
			t.dead.Add(1)
		case core.Deferred:
			t.deferred.Add(1)
		}
	}
}

// takeCounts returns and resets the outcome counts.
func (t *tenant) takeCounts() (published, failed, dead, deferred int64) {
	return t.published.Swap(0), t.failed.Swap(0), t.dead.Swap(0), t.deferred.Swap(0)
}

// tenantStatus is one tenant in /readyz.
type tenantStatus struct {
	Database string `json:"database"`
	Schema   string `json:"schema"`
	Table    string `json:"table"`
	State    string `json:"state"`
	Ready    bool   `json:"ready"`
	Reason   string `json:"reason,omitempty"`
	// LastClaimSecondsAgo is how long ago a claim last succeeded; absent
	// before the first.
	LastClaimSecondsAgo *float64 `json:"last_claim_seconds_ago,omitempty"`
	Failures            int64    `json:"failures"`
	// Doctor lists the warnings and critical findings of the tenant's
	// last cheap doctor run (tenant_doctor.go); they do not affect Ready.
	Doctor []postgres.Finding `json:"doctor,omitempty"`
}

// claimStaleAfter is how long without a successful claim makes a running
// tenant unready: an idle relay claims at least once per poll interval,
// and a busy one between publishes (bounded by the publish timeout) and
// store calls (bounded by the lease).
func (t *tenant) claimStaleAfter() time.Duration {
	rc := t.svc.s.cfg.WithDefaults()
	pt := rc.PublishTimeout
	if pt <= 0 {
		pt = min(10*time.Second, rc.LeaseDuration/2)
	}
	return 2*rc.PollInterval + pt + rc.LeaseDuration
}

func (t *tenant) status(now time.Time, dbUp bool) tenantStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := tenantStatus{Database: t.db.spec.Name, Schema: t.schema, Table: t.table, State: t.state, Reason: t.reason, Failures: t.failures, Doctor: t.doc.findings}
	if !t.lastClaim.IsZero() {
		ago := now.Sub(t.lastClaim).Seconds()
		st.LastClaimSecondsAgo = &ago
	}
	if t.state != tenantRunning {
		if st.Reason == "" {
			st.Reason = "the relay is " + t.state
		}
		return st
	}
	since := t.runStarted
	claimed := t.lastClaim.After(since)
	if claimed {
		since = t.lastClaim
	}
	switch {
	case !dbUp:
		st.Reason = "the database does not answer"
	case t.checkErr != nil:
		st.Reason = oneLine(t.svc.a.redact(t.explain(t.checkErr).Error()))
	case !claimed:
		// Ready means the relay works: until its first claim it has only
		// been told to.
		st.Reason = "starting: no claim completed yet"
		if t.claimErr != nil {
			st.Reason += ": " + oneLine(t.svc.a.redact(t.claimErr.Error()))
		}
	case now.Sub(since) > t.claimStaleAfter():
		st.Reason = fmt.Sprintf("no claim completed for %s", formatDuration(now.Sub(since)))
		if t.claimErr != nil {
			st.Reason += ": " + oneLine(t.svc.a.redact(t.claimErr.Error()))
		}
	default:
		st.Ready = true
	}
	return st
}

// observedStore is the tenant's store with its claims observed.
type observedStore struct {
	*postgres.Store
	t *tenant
}

func (o *observedStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	b, err := o.Store.Claim(ctx, req)
	o.t.noteClaim(err)
	return b, err
}

func (o *observedStore) SettleAndClaim(ctx context.Context, s core.SettleRequest, c core.ClaimRequest) (core.Batch, error, error) {
	b, settleErr, claimErr := o.Store.SettleAndClaim(ctx, s, c)
	o.t.noteClaim(claimErr)
	return b, settleErr, claimErr
}

// statsReader reads the tenant's Stats for its gauges.
type statsReader struct{ t *tenant }

func (r statsReader) Stats(ctx context.Context) (core.Stats, error) {
	if up, _ := r.t.db.up(); !up {
		return core.Stats{}, errDatabaseDown
	}
	r.t.mu.Lock()
	store := r.t.store
	r.t.mu.Unlock()
	return store.Stats(ctx)
}
