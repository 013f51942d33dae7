package core

import (
	"context"
	"errors"
	"time"
)

// DrainReport says what one DrainWithin did.
type DrainReport struct {
	// Batches is the number of batches claimed and settled.
	Batches int `json:"batches"`
	// Claimed is the number of events claimed; each has one of the
	// outcomes below.
	Claimed int `json:"claimed"`
	// Published, Retried, DeadLettered, Released and Deferred count the
	// outcomes (see OutcomeKind). Released events were given back untried
	// because the drain was cut short; they are claimable again at once.
	Published    int `json:"published"`
	Retried      int `json:"retried"`
	DeadLettered int `json:"deadLettered"`
	Released     int `json:"released"`
	Deferred     int `json:"deferred"`
	// SettleFailed counts events whose settle failed: they stay leased
	// until their lease expires and are then published again.
	SettleFailed int `json:"settleFailed"`
	// More reports that the drain stopped at its deadline after a full
	// batch, or was cut off: events may still be due, for the next run.
	More bool `json:"more"`
}

func (d *DrainReport) add(info SettleInfo) {
	d.Batches++
	d.Claimed += len(info.Outcomes)
	if info.Err != nil {
		d.SettleFailed += len(info.Outcomes)
		return
	}
	for _, o := range info.Outcomes {
		switch o.Kind {
		case Published:
			d.Published++
		case Retry:
			d.Retried++
		case DeadLettered:
			d.DeadLettered++
		case Released:
			d.Released++
		case Deferred:
			d.Deferred++
		}
	}
}

// DrainWithin is Drain bounded in time, for a relay run from a scheduler
// with a time limit (a serverless function): it claims batches until none
// is due or until claimUntil, whichever comes first, and publishes and
// settles the batch in flight at claimUntil as usual. ctx bounds the whole
// run: when it ends, the publish in flight is cancelled and its events are
// released, as Drain does, so a run cut off anywhere loses nothing: what
// was published is settled, what was not is claimable again at once, and
// a batch whose settle could not finish is published again when its lease
// expires (at-least-once). Set ctx's deadline at the platform's limit and
// claimUntil early enough before it for one batch to publish and settle
// (RelayConfig.PublishTimeout, plus a settle).
//
// It returns what it did. Stopping at claimUntil is not an error (the
// report says More); ctx's end is, and the report still counts what was
// done.
func (r *Relay) DrainWithin(ctx context.Context, claimUntil time.Time) (DrainReport, error) {
	var rep DrainReport
	soft, cancel := context.WithDeadline(ctx, claimUntil)
	defer cancel()
	_, err := r.runBatches(soft, ctx, false, rep.add)
	switch {
	case ctx.Err() != nil:
		rep.More = true
		return rep, ctx.Err()
	case err != nil && errors.Is(err, context.DeadlineExceeded) && soft.Err() != nil:
		// claimUntil passed: runBatches reports that with the context's
		// error when its last batch was full.
		rep.More = true
		return rep, nil
	}
	return rep, err
}
