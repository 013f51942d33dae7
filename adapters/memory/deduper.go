package memory

import (
	"context"
	"sync"

	"github.com/outboxkit/outboxkit/core"
)

// Deduper is an in-memory core.Deduper. Effects run under a per-key lock, so
// concurrent deliveries of one event apply it once; a failed effect records
// nothing. It has no transaction to offer the effect, so it is only as atomic
// as the effect itself: use it for tests and in-memory effects.
type Deduper struct {
	mu    sync.Mutex
	done  map[core.DedupeKey]bool
	locks map[core.DedupeKey]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

var _ core.Deduper = (*Deduper)(nil)

// NewDeduper returns an empty Deduper.
func NewDeduper() *Deduper {
	return &Deduper{done: make(map[core.DedupeKey]bool), locks: make(map[core.DedupeKey]*keyLock)}
}

// Once implements core.Deduper.
func (d *Deduper) Once(ctx context.Context, key core.DedupeKey, effect func(ctx context.Context) error) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	d.mu.Lock()
	l := d.locks[key]
	if l == nil {
		l = &keyLock{}
		d.locks[key] = l
	}
	l.refs++
	d.mu.Unlock()

	l.mu.Lock()
	defer func() {
		l.mu.Unlock()
		d.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(d.locks, key)
		}
		d.mu.Unlock()
	}()

	d.mu.Lock()
	seen := d.done[key]
	d.mu.Unlock()
	if seen {
		return false, nil
	}
	if err := effect(ctx); err != nil {
		return false, err
	}
	d.mu.Lock()
	d.done[key] = true
	d.mu.Unlock()
	return true, nil
}

// Seen reports whether key was recorded.
func (d *Deduper) Seen(key core.DedupeKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done[key]
}
