package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/qstash"
)

// faults injects the failures a real deployment sees now and then, each at
// most once per event, so a run's counts are predictable:
//
//   - the handler fails the first time it runs for every FailEvery-th
//     event (500: QStash retries it, and its successors arrive early);
//   - the endpoint loses the acknowledgement of every LoseAckEvery-th
//     event after its effect committed (500 instead of 200: QStash
//     delivers it again, and the Sequencer finds it stale).
//
// Events are numbered (order−1)×4 + sequence, so the choice does not
// depend on timing.
type faults struct {
	failEvery, loseAckEvery int

	mu       sync.Mutex
	failed   map[core.ID]bool
	ackLost  map[core.ID]bool
	failures int
	lostAcks int
}

func newFaults(failEvery, loseAckEvery int) *faults {
	return &faults{failEvery: failEvery, loseAckEvery: loseAckEvery, failed: map[core.ID]bool{}, ackLost: map[core.ID]bool{}}
}

func eventNumber(e core.Event) int64 {
	id, err := strconv.ParseInt(e.AggregateID, 10, 64)
	if err != nil {
		return 0
	}
	return (id-1)*int64(len(statuses)) + e.Sequence
}

func chosen(e core.Event, every int, offset int64) bool {
	n := eventNumber(e)
	return every > 0 && n > 0 && n%int64(every) == offset%int64(every)
}

// handler wraps h: the first run of a chosen event fails before h runs.
func (f *faults) handler(h core.Handler) core.Handler {
	return core.HandlerFunc(func(ctx context.Context, e core.Event) error {
		if chosen(e, f.failEvery, 0) {
			f.mu.Lock()
			first := !f.failed[e.ID]
			f.failed[e.ID] = true
			if first {
				f.failures++
			}
			f.mu.Unlock()
			if first {
				return errors.New("tracking is briefly unavailable (injected)")
			}
		}
		return h.Handle(ctx, e)
	})
}

// ackNote carries the receiver's decision from its OnDecision hook to the
// endpoint middleware, through the request's context.
type ackNote struct{ d qstash.Decision }

type ackNoteKey struct{}

// decision is the receiver's OnDecision hook: it runs before the response
// is written.
func (f *faults) decision(ctx context.Context, d qstash.Decision) {
	if n, ok := ctx.Value(ackNoteKey{}).(*ackNote); ok {
		n.d = d
	}
}

// endpoint wraps the receiver: for a chosen event whose effect committed,
// the first 200 becomes a 500, as if the response had been lost on its way
// back to QStash.
func (f *faults) endpoint(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := &ackNote{}
		next.ServeHTTP(&ackLoser{ResponseWriter: w, f: f, n: n}, r.WithContext(context.WithValue(r.Context(), ackNoteKey{}, n)))
	})
}

type ackLoser struct {
	http.ResponseWriter
	f    *faults
	n    *ackNote
	lost bool
}

func (a *ackLoser) WriteHeader(status int) {
	d := a.n.d
	if d.Outcome == qstash.OutcomeApplied && chosen(d.Event, a.f.loseAckEvery, int64(a.f.loseAckEvery/2)) {
		a.f.mu.Lock()
		a.lost = !a.f.ackLost[d.Event.ID]
		a.f.ackLost[d.Event.ID] = true
		if a.lost {
			a.f.lostAcks++
		}
		a.f.mu.Unlock()
	}
	if a.lost {
		a.ResponseWriter.WriteHeader(http.StatusInternalServerError)
		return
	}
	a.ResponseWriter.WriteHeader(status)
}

func (a *ackLoser) Write(b []byte) (int, error) {
	if a.lost {
		return len(b), nil // the applied answer never reaches QStash
	}
	return a.ResponseWriter.Write(b)
}

func (f *faults) counts() (failures, lostAcks int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures, f.lostAcks
}
