package postgres

import (
	"context"
	"sync"
	"time"
)

// notifySQL sends one after-commit notification in a transaction of its
// own, without waiting for that transaction's commit to be flushed.
const notifySQL = "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, '')"

// notifyTimeout bounds one after-commit notification, so a server that
// stopped answering does not hold the sender goroutine.
const notifyTimeout = 5 * time.Second

// DefaultNotifyInterval is Config.NotifyInterval's default.
const DefaultNotifyInterval = time.Millisecond

// afterCommit coalesces Store.Notify calls: at most one pg_notify is in
// flight per Store, the next covers every call that arrived meanwhile, and
// they are paced at one per Config.NotifyInterval with bursts of two. The
// sender goroutine exists only while there is something to send, so a
// Store needs no Close.
type afterCommit struct {
	mu sync.Mutex
	// done is non-nil while a sender runs, and closed when it stops.
	done chan struct{}
	// pending records a Notify that no notification has yet been sent
	// for: a notification in flight may have been sent before the caller's
	// commit, so another must follow it.
	pending bool
	// due paces the notifications at one per Config.NotifyInterval (a
	// generic cell rate algorithm): it is when the next would be sent at
	// that rate. Only the sender goroutine touches it, without mu. One may go out up to an interval before it, a burst of
	// two, so that commits arriving at about the interval's rate never
	// wait on their own jitter.
	due time.Time
	// beforeSend is a test hook, set before the first Notify: it runs as
	// each notification is about to be sent.
	beforeSend func()
}

// Notify wakes the relays listening on the store's channel, for writers
// using NotifyAfterCommit: call it after committing a transaction in which
// Add wrote events (InTx does so for you). It returns at once, never fails
// and is safe for concurrent use.
//
// Notifications are coalesced per Store: at most one SELECT pg_notify is in
// flight, on the store's pool, and the next, sent once it has returned,
// covers every Notify call that arrived meanwhile. They are paced at one
// per Config.NotifyInterval (1 ms by default), with bursts of two. So a
// burst of commits costs one or two notifications, writers committing
// without pause cost about one per interval, and every commit that called
// Notify is followed by a notification sent after that call, at most about
// an interval and a round trip later. A notification that fails (the
// server is down, the pool closed) is logged to Config.Logger and dropped:
// it is a hint, and the relays' poll finds the events.
//
// With NotifyInTransaction and NotifyOff Notify does nothing: in the first,
// the caller's commit has already delivered Add's notification; in the
// second, nothing is ever sent.
func (s *Store) Notify() {
	if s.cfg.Notify != NotifyAfterCommit {
		return
	}
	n := &s.notifier
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pending = true
	if n.done != nil {
		return
	}
	n.done = make(chan struct{})
	go s.sendNotifications(n.done)
}

// sendNotifications sends until no Notify is owed one, then stops.
//
// Why pace them, and not only keep one in flight: on a fast server a
// notification's round trip is about 0.1 ms, so writers committing without
// pause kept one in flight all the time, and each is a transaction of its
// own with a transaction ID. At 8 writers and ~7,000 commits/s that was
// ~2,700 extra transactions a second and 4–10 % fewer commits; at one per
// millisecond it is at most ~1,000 (docs/BENCHMARKS.md, "Run 6").
func (s *Store) sendNotifications(done chan struct{}) {
	n := &s.notifier
	interval := s.cfg.NotifyInterval
	for {
		// due is the sender's own, without the lock: one sender runs at a
		// time, and the next is started under the lock after this one
		// has stopped.
		if wait := time.Until(n.due.Add(-interval)); interval > 0 && wait > 0 {
			// The calls that arrive while the sender waits set pending,
			// which is still set: the notification below covers them.
			// (A wait under a millisecond takes about one: Go's timers are
			// that coarse on an idle process. The burst of two keeps such
			// waits off the path of a modest commit rate.)
			time.Sleep(wait)
		}
		if interval > 0 {
			n.due = later(n.due, time.Now()).Add(interval)
		}
		n.mu.Lock()
		// Cleared before the send: a Notify from now on may have committed
		// after the notification was sent, so it is owed another.
		n.pending = false
		n.mu.Unlock()
		s.sendNotification()
		n.mu.Lock()
		if !n.pending {
			n.done = nil
			close(done)
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (s *Store) sendNotification() {
	if s.notifier.beforeSend != nil {
		s.notifier.beforeSend()
	}
	// Not the caller's context: Notify returns before the notification is
	// sent, and the caller's request may be over by then.
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	// Outside any transaction of the caller's: a transaction that only
	// notifies writes nothing but its commit record. NOTIFY gives it a
	// transaction ID, so by default that commit would wait for a WAL flush,
	// holding PostgreSQL's notify lock and delaying the wake-up by an
	// fsync; synchronous_commit=off for this one transaction skips the
	// wait. Nothing durable depends on it: a notification lost in a crash
	// is a hint lost, and the relays' poll finds the events.
	if _, err := s.db.Exec(ctx, notifySQL, s.cfg.Channel); err != nil {
		s.cfg.Logger.WarnContext(ctx, "outbox notification failed; relays will find the events by polling",
			"channel", s.cfg.Channel, "error", err)
	}
}

// waitNotified returns once no notification is in flight or owed, or when
// ctx is done. Tests use it before they end, so that no sender goroutine
// outlives them.
func (s *Store) waitNotified(ctx context.Context) error {
	for {
		s.notifier.mu.Lock()
		done := s.notifier.done
		s.notifier.mu.Unlock()
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
