package postgres

import "strconv"

// NotifyMode says how writers wake relays after adding events (Config.Notify).
//
// The wake-up is a hint in every mode: a relay that misses it, or runs
// without it, still finds every event by polling (core.RelayConfig's
// PollInterval bounds the delay). The modes differ in what the hint costs
// the writers and how late it can arrive; the package documentation
// ("Waking relays") has the measurements.
type NotifyMode int

const (
	// NotifyNone makes writers send nothing, so they pay nothing: relays
	// learn of new events from their own wake-up (Config.Wakeup), the
	// stream of the table's inserts where the server allows logical
	// replication, and otherwise polling that speeds up while events flow.
	// It is the default.
	NotifyNone NotifyMode = iota

	// NotifyInTransaction makes Add's statement call pg_notify inside the
	// caller's transaction, so the wake-up is delivered by the commit
	// itself, to relays that LISTEN (Config.Wakeup WakeupListen, or the
	// fallback of WakeupAuto). The price is throughput under concurrent
	// writers: PostgreSQL serialises the commits of all transactions that
	// issued NOTIFY (the lock is held until each commit record is flushed),
	// so busy writers lose group commit: measured at 8 writers, 0.30 × the
	// same transaction without it.
	NotifyInTransaction

	// NotifyAfterCommit makes Add send nothing; the writer wakes LISTENing
	// relays after its COMMIT by calling Store.Notify, or by writing
	// through Store.InTx, which does. The notification then travels in a
	// transaction of its own, coalesced per Store (a burst of commits costs
	// one or two notifications) and paced by Config.NotifyInterval, and
	// writers keep most of their group commit (0.94 × at 8 writers). A
	// writer that commits and never calls Notify (or dies between its
	// COMMIT and the notification) leaves its events to the relays' poll.
	NotifyAfterCommit

	// NotifyOff sends nothing, like NotifyNone, and also makes the store's
	// Listen wait for its context without connecting (as Config.Wakeup
	// WakeupPoll does): relays find events by polling alone. Choose it
	// where no wake-up connection may be opened at all.
	NotifyOff
)

// String returns "none", "in-transaction", "after-commit" or "off".
func (m NotifyMode) String() string {
	switch m {
	case NotifyNone:
		return "none"
	case NotifyInTransaction:
		return "in-transaction"
	case NotifyAfterCommit:
		return "after-commit"
	case NotifyOff:
		return "off"
	}
	return "NotifyMode(" + strconv.Itoa(int(m)) + ")"
}

func (m NotifyMode) valid() bool { return m >= NotifyNone && m <= NotifyOff }
