package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxkit/outboxkit/core"
)

// countSink is the in-process counting publisher every system drains into:
// it counts events and, when arrivals is set, stamps each event's first
// arrival. adapters/memory's Publisher is not used because it keeps a clone
// of every event, which would dominate the relay's memory and CPU in a
// 100,000-event drain.
type countSink struct {
	n        atomic.Int64
	arrivals *arrivals // nil: count only
}

func (s *countSink) Publish(ctx context.Context, events []core.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.arrivals != nil {
		now := nanotime()
		for i := range events {
			s.arrivals.arrive(events[i].ID, now)
		}
	}
	s.n.Add(int64(len(events)))
	return nil
}

// wmSink is countSink for Watermill: a message.Publisher the forwarder
// publishes unwrapped messages to.
type wmSink struct {
	n        atomic.Int64
	arrivals *arrivals
}

func (s *wmSink) Publish(_ string, msgs ...*message.Message) error {
	if s.arrivals != nil {
		now := nanotime()
		for _, m := range msgs {
			if id, err := core.ParseID(m.UUID); err == nil {
				s.arrivals.arrive(id, now)
			}
		}
	}
	s.n.Add(int64(len(msgs)))
	return nil
}

func (s *wmSink) Close() error { return nil }

// arrivals maps each expected event to its commit and first-arrival times.
// The index is built before the run and only read during it.
type arrivals struct {
	index    map[core.ID]int
	commitAt []atomic.Int64
	arriveAt []atomic.Int64
	arrived  atomic.Int64
	dups     atomic.Int64
	all      chan struct{}
	allOnce  sync.Once
}

func newArrivals(ids []core.ID) *arrivals {
	a := &arrivals{
		index:    make(map[core.ID]int, len(ids)),
		commitAt: make([]atomic.Int64, len(ids)),
		arriveAt: make([]atomic.Int64, len(ids)),
		all:      make(chan struct{}),
	}
	for i, id := range ids {
		a.index[id] = i
	}
	return a
}

// newIndexedArrivals is newArrivals for systems whose messages carry the
// event's index rather than an event ID (River's job arguments).
func newIndexedArrivals(n int) *arrivals {
	return &arrivals{
		commitAt: make([]atomic.Int64, n),
		arriveAt: make([]atomic.Int64, n),
		all:      make(chan struct{}),
	}
}

func (a *arrivals) committed(i int) { a.commitAt[i].Store(nanotime()) }

func (a *arrivals) arrive(id core.ID, now int64) {
	if i, ok := a.index[id]; ok {
		a.arriveIndex(i, now)
	}
}

// arriveIndex stamps the first arrival of event i and counts later ones as
// duplicates; an index outside the run is ignored.
func (a *arrivals) arriveIndex(i int, now int64) {
	if i < 0 || i >= len(a.arriveAt) {
		return
	}
	if !a.arriveAt[i].CompareAndSwap(0, now) {
		a.dups.Add(1)
		return
	}
	if a.arrived.Add(1) == int64(len(a.arriveAt)) {
		a.allOnce.Do(func() { close(a.all) })
	}
}

// latencies returns commit → arrival for every event that arrived, and how
// many arrived before their producer saw the commit return (counted as 0).
func (a *arrivals) latencies() (lat []time.Duration, early int) {
	lat = make([]time.Duration, 0, len(a.arriveAt))
	for i := range a.arriveAt {
		arr, com := a.arriveAt[i].Load(), a.commitAt[i].Load()
		if arr == 0 || com == 0 {
			continue
		}
		d := time.Duration(arr - com)
		if d < 0 {
			early++
			d = 0
		}
		lat = append(lat, d)
	}
	return lat, early
}

// settleCounter is a core.RelayHook counting events settled as published
// (the row marked, the lease token still matching); done closes when the
// count reaches want.
type settleCounter struct {
	want     int64
	n        atomic.Int64
	lost     atomic.Int64
	done     chan struct{}
	doneOnce sync.Once
	onSettle func(n int64) // optional, called after every batch
}

func newSettleCounter(want int) *settleCounter {
	return &settleCounter{want: int64(want), done: make(chan struct{})}
}

func (c *settleCounter) AfterSettle(_ context.Context, info core.SettleInfo) {
	if info.Err != nil {
		c.lost.Add(int64(len(info.Outcomes)))
		return
	}
	k := int64(0)
	for _, o := range info.Outcomes {
		if o.Kind == core.Published {
			k++
		}
	}
	n := c.n.Add(k)
	if c.onSettle != nil {
		c.onSettle(n)
	}
	if n >= c.want {
		c.doneOnce.Do(func() { close(c.done) })
	}
}

// opStats accumulates the count and total time of one store operation.
type opStats struct {
	calls atomic.Int64
	nanos atomic.Int64
	rows  atomic.Int64
}

func (s *opStats) observe(start time.Time, rows int) {
	s.calls.Add(1)
	s.nanos.Add(int64(time.Since(start)))
	s.rows.Add(int64(rows))
}

// meanMillis is the mean duration of one call in milliseconds.
func (s *opStats) meanMillis() float64 {
	c := s.calls.Load()
	if c == 0 {
		return 0
	}
	return float64(s.nanos.Load()) / float64(c) / 1e6
}

// storeStats are the timings an instrumented store collects.
type storeStats struct {
	claim, settle, settleClaim opStats
}

// instrumentedStore wraps a core.Store to time Claim and Settle and,
// when leases is set, to remember which lease each claimed event is under
// (the scale-out workload's double-publish check). It forwards Listen, so
// the relay still finds the store's Notifier; instrument adds
// SettleAndClaim when the store has it, so the relay still pipelines.
type instrumentedStore struct {
	core.Store
	stats  *storeStats
	leases *leaseMap
}

// instrumentedSettleClaimer is an instrumentedStore over a store that
// implements core.SettleClaimer.
type instrumentedSettleClaimer struct {
	*instrumentedStore
	sc core.SettleClaimer
}

// instrument wraps inner; the result is a core.SettleClaimer exactly when
// inner is one.
func instrument(inner core.Store, leases *leaseMap) (core.Store, *storeStats) {
	st := &instrumentedStore{Store: inner, stats: &storeStats{}, leases: leases}
	if sc, ok := inner.(core.SettleClaimer); ok {
		return &instrumentedSettleClaimer{instrumentedStore: st, sc: sc}, st.stats
	}
	return st, st.stats
}

func (s *instrumentedStore) Claim(ctx context.Context, req core.ClaimRequest) (core.Batch, error) {
	start := time.Now()
	b, err := s.Store.Claim(ctx, req)
	s.stats.claim.observe(start, len(b.Events))
	if err == nil && s.leases != nil {
		s.leases.put(b)
	}
	return b, err
}

func (s *instrumentedStore) Settle(ctx context.Context, req core.SettleRequest) error {
	start := time.Now()
	err := s.Store.Settle(ctx, req)
	s.stats.settle.observe(start, len(req.Outcomes))
	return err
}

func (s *instrumentedStore) Listen(ctx context.Context, wake func()) error {
	if n, ok := s.Store.(core.Notifier); ok {
		return n.Listen(ctx, wake)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *instrumentedSettleClaimer) SettleAndClaim(ctx context.Context, sreq core.SettleRequest, creq core.ClaimRequest) (core.Batch, error, error) {
	start := time.Now()
	b, settleErr, claimErr := s.sc.SettleAndClaim(ctx, sreq, creq)
	s.stats.settleClaim.observe(start, len(sreq.Outcomes))
	if claimErr == nil && s.leases != nil {
		s.leases.put(b)
	}
	return b, settleErr, claimErr
}

// leaseMap remembers the lease token of each claimed, not yet published
// event.
type leaseMap struct {
	mu sync.Mutex
	m  map[core.ID]core.ID
}

func (l *leaseMap) put(b core.Batch) {
	l.mu.Lock()
	for i := range b.Events {
		l.m[b.Events[i].ID] = b.Lease.Token
	}
	l.mu.Unlock()
}

// take returns and forgets the lease token of id.
func (l *leaseMap) take(id core.ID) core.ID {
	l.mu.Lock()
	t := l.m[id]
	delete(l.m, id)
	l.mu.Unlock()
	return t
}
