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

// afterCommit coalesces Store.Notify calls: at most one pg_notify is in
// flight per Store, and calls that arrive while it is make exactly one more
// follow it. The sender goroutine exists only while there is something to
// send, so a Store needs no Close.
type afterCommit struct {
	mu sync.Mutex
	// done is non-nil while a sender runs, and closed when it stops.
	done chan struct{}
	// pending records a Notify that arrived while a notification was in
	// flight: that notification may have been sent before the caller's
	// commit, so another must follow it.
	pending bool
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
// flight, on the store's pool, and however many Notify calls arrive while
// it is, exactly one more is sent after it. So a burst of commits costs one
// or two notifications, and every commit that called Notify is followed by
// a notification sent after that call. A notification that fails (the
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
	if n.done != nil {
		n.pending = true
		return
	}
	n.done = make(chan struct{})
	go s.sendNotifications(n.done)
}

// sendNotifications sends until no Notify is owed one, then stops.
func (s *Store) sendNotifications(done chan struct{}) {
	n := &s.notifier
	for {
		s.sendNotification()
		n.mu.Lock()
		if !n.pending {
			n.done = nil
			close(done)
			n.mu.Unlock()
			return
		}
		n.pending = false
		n.mu.Unlock()
	}
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
	if _, err := s.pool.Exec(ctx, notifySQL, s.cfg.Channel); err != nil {
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
