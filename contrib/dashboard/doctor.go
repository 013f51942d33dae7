package dashboard

import (
	"context"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// The doctor's cheap checks on the overview. Each table's overview
// carries the warnings and critical findings of postgres.Doctor with
// postgres.CheapChecks (catalog and statistics reads only), run at most
// every doctorEvery in a goroutine of its own: a page never waits for
// them, and many browsers refreshing cost the database one run. The
// first overview after start shows none yet; the next refresh does.
// `outboxctl doctor` runs every check.

// doctorEvery is how often a table's cheap checks run.
const doctorEvery = 30 * time.Second

// doctorTimeout bounds one run.
const doctorTimeout = 10 * time.Second

// doctorFindings returns t's last findings and starts a new run when the
// last one is older than doctorEvery. t.mu is held.
func (t *target) doctorFindings() []postgres.Finding {
	if !t.doctorRunning && time.Since(t.doctorAt) >= doctorEvery {
		t.doctorRunning, t.doctorAt = true, time.Now()
		go t.runDoctor()
	}
	return t.doctor
}

func (t *target) runDoctor() {
	ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
	defer cancel()
	rep, err := postgres.Doctor(ctx, t.Pool, &postgres.DoctorConfig{Schema: t.Schema, Table: t.Table, Checks: postgres.CheapChecks()})
	t.mu.Lock()
	defer t.mu.Unlock()
	t.doctorRunning = false
	if err == nil {
		t.doctor = rep.AtLeast(postgres.SeverityWarning)
	}
}
