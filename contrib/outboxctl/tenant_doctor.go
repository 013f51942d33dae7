package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// The doctor's cheap checks in /readyz. Every doctorEvery, each running
// tenant runs postgres.Doctor with postgres.CheapChecks (catalog and
// statistics reads only: no EXPLAIN, no index scan) in a goroutine of its
// own, so a slow check never holds up the pings that make /readyz follow
// the database within seconds. Its warnings and critical findings appear
// in the tenant's /readyz entry as "doctor": they are detail, not
// readiness: a server with autovacuum off, or another team's idle
// transaction, makes the outbox slower, and taking every relay out of
// service for it would stop the outbox altogether. `outboxctl doctor`
// runs every check.

// doctorEvery is how often a tenant's cheap checks run.
const doctorEvery = 30 * time.Second

// doctorState is a tenant's last doctor report.
type doctorState struct {
	running atomic.Bool
	last    atomic.Int64 // unix nanoseconds of the last start
	// findings are the last report's warnings and worse (guarded by
	// tenant.mu).
	findings []postgres.Finding
}

// maybeDoctor starts the tenant's cheap checks when they are due and not
// already running.
func (t *tenant) maybeDoctor(ctx context.Context, now time.Time) {
	if now.UnixNano()-t.doc.last.Load() < int64(doctorEvery) || !t.doc.running.CompareAndSwap(false, true) {
		return
	}
	t.doc.last.Store(now.UnixNano())
	go func() {
		defer t.doc.running.Store(false)
		cctx, cancel := context.WithTimeout(ctx, doctorEvery/2)
		defer cancel()
		rep, err := postgres.Doctor(cctx, t.db.pool, &postgres.DoctorConfig{
			Schema: t.schema, Table: t.table, Ordering: t.svc.s.ordering, Checks: postgres.CheapChecks(),
		})
		if err != nil {
			// The pings and the schema check report an unreachable or
			// unmigrated database; the last findings stay until a run
			// succeeds.
			return
		}
		t.mu.Lock()
		t.doc.findings = rep.AtLeast(postgres.SeverityWarning)
		t.mu.Unlock()
	}()
}
