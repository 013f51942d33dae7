package qstashdev

import (
	"container/heap"
	"net/http"
	"net/url"
	"time"
)

// Every piece of mutable state lives behind Server.mu. Sections under the
// lock only move pointers between lists and counters; HTTP calls, signing,
// JSON and body copies happen outside it.

// msgState is where a message waits. A message is on exactly one list at a
// time; lists drop entries whose state no longer matches (lazy removal), so
// a cancel is O(1) wherever the message sits.
type msgState uint8

const (
	stQueued    msgState = iota // on its queue's pending list, waiting for a queue slot
	stScheduled                 // in the timer heap until nextAt
	stWaitingFC                 // on its flow-control key's waiting list
	stReady                     // on the ready list, waiting for a worker
	stActive                    // an attempt is in flight
	stDone                      // delivered, failed, or cancelled; forgotten
)

// message is one delivery to one URL. Fields above the marker are fixed at
// creation and read without the lock; those below change under s.mu.
type message struct {
	id           string
	url          string // the exact destination string, also the JWT sub
	group        string // URL group name, if published to one
	endpointName string
	queue        *queue
	queueName    string
	method       string
	header       http.Header // delivered headers: forwarded ones and Content-Type
	body         []byte
	maxRetries   int
	retryDelay   *delayExpr
	timeout      time.Duration
	notBefore    time.Time // first delivery not before; zero: at once
	createdAt    time.Time
	callerIP     string
	label        string   // Upstash-Label as sent
	labels       []string // label split at commas: each is a filter
	scheduleID   string   // the schedule that created the message, if any
	redact       redaction

	callback        string
	failureCallback string
	callbackOpts    derivedOpts // how callback messages are sent
	failureOpts     derivedOpts

	fcKey       string
	fcPar       int
	fcRate      int
	fcPeriod    time.Duration
	kind        msgKind
	sourceMsgID string // for callbacks: the message whose attempt they report
	size        int64  // body and header bytes, counted against MaxPendingBytes

	// --- guarded by Server.mu ---
	state           msgState
	retried         int       // failed attempts so far; the next attempt's Upstash-Retried
	nextAt          time.Time // when a scheduled message becomes due
	holdsQueue      bool      // occupies one of its queue's parallelism slots
	holdsFC         bool      // occupies one of its flow-control key's slots
	cancelRequested bool
	fc              *flowKey // the key whose list or slot m is on (stWaitingFC, holdsFC)

	// u is url parsed, shared (read-only) by messages to the same URL.
	u *url.URL
}

type msgKind uint8

const (
	kindNormal msgKind = iota
	kindCallback
	kindFailureCallback
)

// derivedOpts configures messages QStash creates on a message's behalf
// (callbacks), from the Upstash-Callback-* / Upstash-Failure-Callback-*
// headers.
type derivedOpts struct {
	header     http.Header // forwarded headers
	method     string
	maxRetries int
	timeout    time.Duration
}

// queue is a FIFO queue: at most parallelism messages are unfinished-and-
// started at once, and a started message keeps its slot through its retries,
// so with parallelism 1 the next message waits for the current one to be
// delivered or to fail.
type queue struct {
	name        string
	parallelism int
	paused      bool
	createdAt   time.Time
	updatedAt   time.Time
	pending     deque[*message]
	active      int // slots held
	unfinished  int // lag: messages enqueued and not yet finished
}

// flowKey limits deliveries sharing an Upstash-Flow-Control-Key: at most
// parallelism attempts in flight and rate attempt starts per period (a fixed
// window). Excess messages wait on the list in arrival order; nothing is
// rejected.
type flowKey struct {
	key         string
	parallelism int // 0: unlimited
	rate        int // 0: unlimited
	period      time.Duration
	active      int
	windowStart time.Time
	windowCount int
	waiting     deque[*message]
	timerArmed  bool // a heap entry will re-drain this key when its window ends
	// Set through the flow-control API: a paused key starts nothing, and
	// a pinned limit is not changed by the messages' own.
	paused, pinnedPar, pinnedRate bool
}

func (f *flowKey) windowOver(now time.Time) bool {
	return !now.Before(f.windowStart.Add(f.period))
}

func (f *flowKey) parallelismFull() bool {
	return f.parallelism > 0 && f.active >= f.parallelism
}

func (f *flowKey) rateFull(now time.Time) bool {
	return f.rate > 0 && f.windowCount >= f.rate && !f.windowOver(now)
}

func (f *flowKey) start(now time.Time) {
	f.active++
	if f.rate > 0 {
		if f.windowOver(now) {
			f.windowStart, f.windowCount = now, 0
		}
		f.windowCount++
	}
}

// timerItem is a heap entry: a message becoming due, or a flow-control
// window ending.
type timerItem struct {
	at  time.Time
	seq uint64 // ties break in insertion order, keeping equal-time FIFO
	m   *message
	fc  *flowKey
	sc  *schedule
}

type timerHeap []timerItem

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = timerItem{}
	*h = old[:len(old)-1]
	return it
}

// deque is a growable ring buffer: FIFO lists without per-element
// allocation.
type deque[T any] struct {
	buf     []T
	head, n int
}

func (d *deque[T]) len() int { return d.n }

func (d *deque[T]) push(v T) {
	if d.n == len(d.buf) {
		nb := make([]T, max(16, 2*len(d.buf)))
		for i := 0; i < d.n; i++ {
			nb[i] = d.buf[(d.head+i)%len(d.buf)]
		}
		d.buf, d.head = nb, 0
	}
	d.buf[(d.head+d.n)%len(d.buf)] = v
	d.n++
}

func (d *deque[T]) front() T { return d.buf[d.head] }

func (d *deque[T]) pop() T {
	var zero T
	v := d.buf[d.head]
	d.buf[d.head] = zero
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return v
}

func (d *deque[T]) each(f func(T)) {
	for i := 0; i < d.n; i++ {
		f(d.buf[(d.head+i)%len(d.buf)])
	}
}

// --- transitions; all called with s.mu held ---

// createLocked registers a new message and starts it on its way.
func (s *Server) createLocked(m *message, now time.Time) {
	if m.u == nil {
		m.u = s.parseURLLocked(m.url)
	}
	s.messages[m.id] = m
	s.pending++
	s.pendingBytes += m.size
	s.recordLocked(m, StateCreated, now, "", time.Time{}, 0)
	if q := m.queue; q != nil {
		q.unfinished++
		m.state = stQueued
		q.pending.push(m)
		s.dispatchQueueLocked(q, now)
		return
	}
	s.scheduleLocked(m, m.notBefore, now)
}

// dispatchQueueLocked starts queued messages while the queue has free slots.
func (s *Server) dispatchQueueLocked(q *queue, now time.Time) {
	for !q.paused && q.active < q.parallelism && q.pending.len() > 0 {
		m := q.pending.pop()
		if m.state != stQueued {
			continue // cancelled while waiting
		}
		q.active++
		m.holdsQueue = true
		s.scheduleLocked(m, m.notBefore, now)
	}
}

// scheduleLocked makes m due at at: later through the timer heap, or now.
func (s *Server) scheduleLocked(m *message, at, now time.Time) {
	if at.After(now) {
		m.state = stScheduled
		m.nextAt = at
		s.pushTimerLocked(timerItem{at: at, m: m})
		return
	}
	s.admitLocked(m, now)
}

func (s *Server) pushTimerLocked(it timerItem) {
	s.timerSeq++
	it.seq = s.timerSeq
	heap.Push(&s.timers, it)
	if s.timers[0].seq == it.seq {
		// New earliest deadline: the scheduler must re-arm its timer.
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// admitLocked passes a due message through its flow-control key (if any)
// to the ready list.
func (s *Server) admitLocked(m *message, now time.Time) {
	if m.fcKey == "" {
		s.readyLocked(m)
		return
	}
	// The key is looked up at each admission, not kept on the message: idle
	// keys are dropped (pruneFlowLocked), and a message waiting for a retry
	// must not revive a stale copy beside a newer one.
	f := s.flows[m.fcKey]
	if f == nil {
		f = &flowKey{key: m.fcKey, parallelism: m.fcPar, rate: m.fcRate, period: m.fcPeriod}
		s.flows[m.fcKey] = f
	}
	m.fc = f
	m.state = stWaitingFC
	f.waiting.push(m)
	s.drainFlowLocked(f, now)
}

// drainFlowLocked moves waiting messages of a flow-control key to the ready
// list while the key allows, and arms a wake-up for the end of a full rate
// window (a full parallelism is woken by the attempt that frees a slot).
func (s *Server) drainFlowLocked(f *flowKey, now time.Time) {
	for f.waiting.len() > 0 && !f.paused {
		m := f.waiting.front()
		if m.state != stWaitingFC {
			f.waiting.pop() // cancelled while waiting
			continue
		}
		if f.parallelismFull() {
			return
		}
		if f.rateFull(now) {
			if !f.timerArmed {
				f.timerArmed = true
				s.pushTimerLocked(timerItem{at: f.windowStart.Add(f.period), fc: f})
			}
			return
		}
		f.waiting.pop()
		f.start(now)
		m.holdsFC = true
		s.readyLocked(m)
	}
}

func (s *Server) readyLocked(m *message) {
	m.state = stReady
	s.ready.push(m)
	s.workCond.Signal()
}

// releaseFlowLocked frees m's flow-control slot, letting a waiter start.
func (s *Server) releaseFlowLocked(m *message, now time.Time) {
	if !m.holdsFC {
		return
	}
	m.holdsFC = false
	f := m.fc
	f.active--
	s.drainFlowLocked(f, now)
	s.pruneFlowLocked(f, now)
}

// pruneFlowLocked forgets an idle key, so a publisher that uses one key per
// aggregate does not grow memory without bound. A key whose rate window is
// still open is kept: forgetting it would reset the window early.
func (s *Server) pruneFlowLocked(f *flowKey, now time.Time) {
	if f.active == 0 && f.waiting.len() == 0 && !f.timerArmed && !f.paused && !f.pinnedPar && !f.pinnedRate &&
		(f.rate == 0 || f.windowOver(now)) && s.flows[f.key] == f {
		delete(s.flows, f.key)
	}
}

// finishLocked forgets a message that was delivered, failed or cancelled.
func (s *Server) finishLocked(m *message, now time.Time) {
	m.state = stDone
	s.releaseFlowLocked(m, now)
	delete(s.messages, m.id)
	if q := m.queue; q != nil {
		q.unfinished--
		if m.holdsQueue {
			m.holdsQueue = false
			q.active--
			s.dispatchQueueLocked(q, now)
		}
	}
	s.pending--
	s.pendingBytes -= m.size
	if s.pending == 0 && s.idleCh != nil {
		close(s.idleCh)
		s.idleCh = nil
	}
}

// cancelLocked cancels m. An attempt in flight cannot be recalled: it is
// left to finish, and the message is then not retried.
func (s *Server) cancelLocked(m *message, now time.Time) {
	if m.cancelRequested {
		return
	}
	m.cancelRequested = true
	s.recordLocked(m, StateCancelRequested, now, "", time.Time{}, 0)
	if m.state == stActive {
		return
	}
	wasWaitingFC := m.state == stWaitingFC
	s.recordLocked(m, StateCancelled, now, "", time.Time{}, 0)
	s.finishLocked(m, now)
	if wasWaitingFC {
		// Drop it from the key's list now, so later arrivals are not held
		// behind a dead entry.
		s.drainFlowLocked(m.fc, now)
		s.pruneFlowLocked(m.fc, now)
	}
}

// runDueLocked handles every heap entry due at now.
func (s *Server) runDueLocked(now time.Time) {
	for len(s.timers) > 0 && !s.timers[0].at.After(now) {
		it := heap.Pop(&s.timers).(timerItem)
		switch {
		case it.m != nil:
			if it.m.state == stScheduled {
				s.admitLocked(it.m, now)
			}
		case it.fc != nil:
			it.fc.timerArmed = false
			s.drainFlowLocked(it.fc, now)
			s.pruneFlowLocked(it.fc, now)
		case it.sc != nil:
			s.fireScheduleLocked(it.sc, it.at, now)
		}
	}
}

// updateFlowLocked applies a publish's limits to an existing key: the latest
// publish's limits win, as in QStash. A new key is created on admission.
func (s *Server) updateFlowLocked(m *message, now time.Time) {
	f := s.flows[m.fcKey]
	if f == nil {
		return
	}
	if !f.pinnedPar {
		f.parallelism = m.fcPar
	}
	if !f.pinnedRate {
		f.rate, f.period = m.fcRate, m.fcPeriod
	}
	s.drainFlowLocked(f, now) // raised limits apply at once
}

// parseURLLocked parses a destination once for all its messages: a relay
// sends thousands of messages to a handful of URLs.
func (s *Server) parseURLLocked(raw string) *url.URL {
	if u, ok := s.urls[raw]; ok {
		return u
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	if len(s.urls) >= 1024 {
		clear(s.urls) // a bound, not an LRU: misses only cost a parse
	}
	s.urls[raw] = u
	return u
}
