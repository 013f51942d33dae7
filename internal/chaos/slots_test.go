package chaos_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// slotWatch records the replication slots the run's relays stream from, so
// the run can prove the promise of WAL wake-ups' temporary slots: a relay
// that dies, however it dies, leaves no slot behind to retain WAL.
//
// A slot is tied to a relay through its WAL sender's application_name
// (the relay's, since the wake-up connection copies the pool's settings).
type slotWatch struct {
	e  *env
	mu sync.Mutex
	// seen maps every slot name observed to the relay index streaming it.
	seen map[string]int
}

func newSlotWatch(e *env) *slotWatch { return &slotWatch{e: e, seen: map[string]int{}} }

// walLogical reports whether the server can stream WAL wake-ups at all.
func (w *slotWatch) walLogical(ctx context.Context) (bool, error) {
	var level string
	err := w.e.pool.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	return level == "logical", err
}

// sample records the slots the run's relays hold now and returns those of
// relay i (every relay's when i < 0).
func (w *slotWatch) sample(ctx context.Context, i int) ([]string, error) {
	prefix := "chaosrelay-" + w.e.runID + "-"
	rows, err := w.e.pool.Query(ctx, `SELECT s.slot_name, a.application_name
		FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid
		WHERE starts_with(a.application_name, $1)`, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var of []string
	w.mu.Lock()
	defer w.mu.Unlock()
	for rows.Next() {
		var slot, app string
		if err := rows.Scan(&slot, &app); err != nil {
			return nil, err
		}
		idx := -1
		for j := range w.e.relays {
			if app == w.e.relayAppName(j) {
				idx = j
			}
		}
		w.seen[slot] = idx
		if i < 0 || idx == i {
			of = append(of, slot)
		}
	}
	return of, rows.Err()
}

// run samples every 200 ms until ctx is done, so slots of relays that
// crash on their own (-crash-after) are seen too.
func (w *slotWatch) run(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = w.sample(ctx, -1) // a restarting server just skips a sample
		}
	}
}

// left returns those of slots that still exist.
func (w *slotWatch) left(ctx context.Context, slots []string) ([]string, error) {
	var left []string
	err := w.e.pool.QueryRow(ctx, `SELECT coalesce(array_agg(slot_name ORDER BY slot_name), '{}')
		FROM pg_replication_slots WHERE slot_name = ANY($1)`, slots).Scan(&left)
	return left, err
}

// waitGone waits until none of slots exists; a relay's slot must go with
// its connection, which the server notices when the killed process's socket
// closes.
func (w *slotWatch) waitGone(t *testing.T, slots []string, why string) {
	t.Helper()
	if len(slots) == 0 {
		return
	}
	var left []string
	err := waitUntil(context.Background(), 15*time.Second, func(ctx context.Context) (bool, error) {
		now, err := w.left(ctx, slots)
		if err != nil {
			return false, err
		}
		left = now
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("%s: replication slots %s still exist: %v", why, strings.Join(left, ", "), err)
	}
}

// all returns every slot seen.
func (w *slotWatch) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.seen))
	for s := range w.seen {
		out = append(out, s)
	}
	return out
}
