package memory

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
)

// StoreConfig configures a Store. The zero value is usable.
type StoreConfig struct {
	// Ordering enables per-aggregate ordering: only the head (lowest
	// Sequence) of each aggregate's pending events is claimable, and only
	// while no earlier event of it is leased. Defaults to false.
	Ordering bool
	// MaxPayloadBytes refuses larger payloads in Add. Defaults to 1 MiB;
	// negative means no limit.
	MaxPayloadBytes int
	// Clock supplies "now" when a request carries none. Defaults to
	// core.SystemClock.
	Clock core.Clock
}

// Store is an in-memory core.Store with the optional Notifier, StatsReader,
// Replayer and Pruner capabilities.
type Store struct {
	cfg StoreConfig

	mu        sync.Mutex
	rows      map[core.ID]*row
	order     []core.ID // insertion order; claim order is (CreatedAt, insertion)
	seq       map[string]int64
	listeners map[int]func()
	nextL     int
	inserted  int64
}

type row struct {
	e           core.Event
	n           int64 // insertion number, breaks CreatedAt ties
	publishedAt time.Time
	deadAt      time.Time
	leaseToken  core.ID
	leaseUntil  time.Time
	lastError   string
}

var (
	_ core.Store         = (*Store)(nil)
	_ core.Notifier      = (*Store)(nil)
	_ core.StatsReader   = (*Store)(nil)
	_ core.Replayer      = (*Store)(nil)
	_ core.Pruner        = (*Store)(nil)
	_ core.SettleClaimer = (*Store)(nil)
)

// NewStore returns an empty store. cfg may be nil.
func NewStore(cfg *StoreConfig) *Store {
	var c StoreConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Clock == nil {
		c.Clock = core.SystemClock{}
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = 1 << 20
	}
	return &Store{
		cfg:       c,
		rows:      make(map[core.ID]*row),
		seq:       make(map[string]int64),
		listeners: make(map[int]func()),
	}
}

func (s *Store) now(t time.Time) time.Time {
	if !t.IsZero() {
		return t
	}
	return s.cfg.Clock.Now()
}

// Add writes events atomically: all of them, or none when any is invalid or
// its ID already exists. It assigns CreatedAt (when zero), SchemaVersion 1
// (when zero) and, with ordering on, Sequence.
func (s *Store) Add(ctx context.Context, events ...core.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range events {
		if err := events[i].Validate(); err != nil {
			return err
		}
		if err := events[i].ValidatePayloadSize(s.cfg.MaxPayloadBytes); err != nil {
			return err
		}
	}
	s.mu.Lock()
	seen := make(map[core.ID]bool, len(events))
	for _, e := range events {
		if _, dup := s.rows[e.ID]; dup || seen[e.ID] {
			s.mu.Unlock()
			return &core.ValidationError{EventID: e.ID, Field: "ID", Reason: "already exists in the outbox"}
		}
		seen[e.ID] = true
	}
	now := s.cfg.Clock.Now()
	for _, e := range events {
		e = e.Clone()
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
		if e.SchemaVersion == 0 {
			e.SchemaVersion = 1
		}
		if e.AvailableAt.IsZero() {
			e.AvailableAt = e.CreatedAt
		}
		e.Attempts = 0
		e.Sequence = 0
		if s.cfg.Ordering && e.AggregateID != "" {
			k := e.AggregateKey()
			s.seq[k]++
			e.Sequence = s.seq[k]
		}
		s.inserted++
		s.rows[e.ID] = &row{e: e, n: s.inserted}
		s.order = append(s.order, e.ID)
	}
	wakes := make([]func(), 0, len(s.listeners))
	for _, w := range s.listeners {
		wakes = append(wakes, w)
	}
	s.mu.Unlock()
	for _, w := range wakes {
		w()
	}
	return nil
}

func (r *row) pending() bool { return r.publishedAt.IsZero() && r.deadAt.IsZero() }

// Claim implements core.Store.
func (s *Store) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	if err := ctx.Err(); err != nil {
		return core.Batch{}, err
	}
	if req.Limit < 1 || req.LeaseFor <= 0 {
		return core.Batch{}, errors.New("memory: claim needs a positive Limit and LeaseFor")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now(req.Now)

	candidates := make([]*row, 0)
	// With ordering, an aggregate is blocked while any of its pending events
	// is leased, and only its lowest sequence is a candidate.
	var heads map[string]*row
	if s.cfg.Ordering {
		heads = make(map[string]*row)
		for _, id := range s.order {
			r := s.rows[id]
			if r == nil || !r.pending() || r.e.AggregateID == "" {
				continue
			}
			k := r.e.AggregateKey()
			if h, ok := heads[k]; !ok || (h != nil && r.e.Sequence < h.e.Sequence) {
				heads[k] = r
			}
		}
	}
	for _, id := range s.order {
		r := s.rows[id]
		if r == nil || !r.pending() || r.e.AvailableAt.After(now) || r.leaseUntil.After(now) {
			continue
		}
		if req.Destination != "" && r.e.Destination != req.Destination {
			continue
		}
		if heads != nil && r.e.AggregateID != "" && heads[r.e.AggregateKey()] != r {
			continue
		}
		candidates = append(candidates, r)
	}
	sort.SliceStable(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if !a.e.CreatedAt.Equal(b.e.CreatedAt) {
			return a.e.CreatedAt.Before(b.e.CreatedAt)
		}
		return a.n < b.n
	})
	if len(candidates) > req.Limit {
		candidates = candidates[:req.Limit]
	}
	lease := core.Lease{Token: core.NewID(), Until: now.Add(req.LeaseFor)}
	batch := core.Batch{Lease: lease, Events: make([]core.Event, 0, len(candidates))}
	for _, r := range candidates {
		r.leaseToken = lease.Token
		r.leaseUntil = lease.Until
		r.e.Attempts++
		batch.Events = append(batch.Events, r.e.Clone())
	}
	return batch, nil
}

// Settle implements core.Store.
func (s *Store) Settle(ctx context.Context, req core.SettleRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now(req.Now)
	var lost []core.ID
	for _, o := range req.Outcomes {
		r := s.rows[o.ID]
		if r == nil || r.leaseToken != req.Lease.Token || !r.pending() {
			lost = append(lost, o.ID)
			continue
		}
		r.leaseToken, r.leaseUntil = core.ID{}, time.Time{}
		switch o.Kind {
		case core.Published:
			r.publishedAt = now
		case core.Retry:
			r.lastError = o.Error
			r.e.AvailableAt = now.Add(o.Delay)
		case core.DeadLettered:
			r.lastError = o.Error
			r.deadAt = now
		case core.Released:
			r.e.Attempts--
		case core.Deferred:
			r.lastError = o.Error
			r.e.AvailableAt = now.Add(o.Delay)
			r.e.Attempts--
		default:
			return errors.New("memory: unknown outcome kind " + o.Kind.String())
		}
	}
	if len(lost) > 0 {
		return &core.LeaseLostError{IDs: lost}
	}
	return nil
}

// SettleAndClaim implements core.SettleClaimer. In memory there is no round
// trip to save; it exists so relay tests exercise the pipelined path.
func (s *Store) SettleAndClaim(ctx context.Context, sreq core.SettleRequest, creq core.ClaimRequest) (core.Batch, error, error) {
	settleErr := s.Settle(ctx, sreq)
	if settleErr != nil && !errors.Is(settleErr, core.ErrLeaseLost) {
		return core.Batch{}, settleErr, settleErr
	}
	b, claimErr := s.Claim(ctx, creq)
	return b, settleErr, claimErr
}

// Listen implements core.Notifier: Add wakes every listener.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	s.mu.Lock()
	id := s.nextL
	s.nextL++
	s.listeners[id] = wake
	s.mu.Unlock()
	wake()
	<-ctx.Done()
	s.mu.Lock()
	delete(s.listeners, id)
	s.mu.Unlock()
	return ctx.Err()
}

// Stats implements core.StatsReader.
func (s *Store) Stats(ctx context.Context) (core.Stats, error) {
	if err := ctx.Err(); err != nil {
		return core.Stats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	st := core.Stats{Attempts: make(map[int]int64)}
	for _, r := range s.rows {
		switch {
		case !r.deadAt.IsZero():
			st.DeadLettered++
		case r.pending():
			st.Pending++
			st.Attempts[r.e.Attempts]++
			if r.leaseUntil.After(now) {
				st.Leased++
			}
			if st.OldestPendingAt.IsZero() || r.e.CreatedAt.Before(st.OldestPendingAt) {
				st.OldestPendingAt = r.e.CreatedAt
			}
		}
	}
	if !st.OldestPendingAt.IsZero() {
		st.OldestPendingAge = max(0, now.Sub(st.OldestPendingAt))
	}
	return st, nil
}

// Replay implements core.Replayer.
func (s *Store) Replay(ctx context.Context, f core.ReplayFilter) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if f.Empty() {
		return 0, errors.New("memory: replay filter is empty: name IDs, types, an aggregate, a time range or DeadOnly, or set All")
	}
	ids := make(map[core.ID]bool, len(f.IDs))
	for _, id := range f.IDs {
		ids[id] = true
	}
	types := make(map[string]bool, len(f.Types))
	for _, t := range f.Types {
		types[t] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	var n int64
	for _, r := range s.rows {
		switch {
		case r.pending():
			continue // already on its way; replaying would steal a live lease
		case f.DeadOnly && r.deadAt.IsZero():
			continue
		case len(ids) > 0 && !ids[r.e.ID]:
			continue
		case len(types) > 0 && !types[r.e.Type]:
			continue
		case f.AggregateType != "" && f.AggregateType != r.e.AggregateType:
			continue
		case f.AggregateID != "" && f.AggregateID != r.e.AggregateID:
			continue
		case !f.Since.IsZero() && r.e.CreatedAt.Before(f.Since):
			continue
		case !f.Until.IsZero() && !r.e.CreatedAt.Before(f.Until):
			continue
		}
		r.publishedAt, r.deadAt = time.Time{}, time.Time{}
		r.leaseToken, r.leaseUntil = core.ID{}, time.Time{}
		r.e.Attempts = 0
		r.e.AvailableAt = now
		n++
	}
	return n, nil
}

// Prune implements core.Pruner.
func (s *Store) Prune(ctx context.Context, req core.PruneRequest) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	var n int64
	kept := s.order[:0]
	for _, id := range s.order {
		r := s.rows[id]
		if !r.publishedAt.IsZero() && r.publishedAt.Before(req.PublishedBefore) {
			delete(s.rows, id)
			n++
			continue
		}
		kept = append(kept, id)
	}
	s.order = kept
	s.mu.Unlock()
	if req.Progress != nil && n > 0 {
		req.Progress(n)
	}
	return n, nil
}

// EventState is a snapshot of one stored event, for tests and tools.
type EventState struct {
	Event       core.Event
	PublishedAt time.Time
	DeadAt      time.Time
	LastError   string
	LeaseUntil  time.Time
}

// Get returns the state of one event.
func (s *Store) Get(id core.ID) (EventState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[id]
	if !ok {
		return EventState{}, false
	}
	return EventState{Event: r.e.Clone(), PublishedAt: r.publishedAt, DeadAt: r.deadAt, LastError: r.lastError, LeaseUntil: r.leaseUntil}, true
}
