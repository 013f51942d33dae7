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
	// NotifyInTransaction makes Add's statement call pg_notify inside the
	// caller's transaction, so the wake-up is delivered by the commit
	// itself, with nothing else to call: Add plus the caller's own Commit
	// wakes relays at once. The price is throughput under concurrent
	// writers: PostgreSQL serialises the commits of all transactions that
	// issued NOTIFY (the lock is held until each commit record is flushed),
	// so busy writers lose group commit. It is the default.
	NotifyInTransaction NotifyMode = iota

	// NotifyAfterCommit makes Add send nothing; the writer wakes relays
	// after its COMMIT by calling Store.Notify, or by writing through
	// Store.InTx, which does. The notification then travels in a
	// transaction of its own, coalesced per Store (a burst of commits costs
	// one or two notifications) and paced by Config.NotifyInterval, and
	// writers keep group commit. A writer
	// that commits and never calls Notify (or dies between its COMMIT and
	// the notification) leaves its events to the relays' poll. Choose it
	// when many writers commit concurrently.
	NotifyAfterCommit

	// NotifyOff sends nothing and makes Listen wait for its context without
	// connecting: relays find events by polling alone. Choose it where
	// LISTEN is unavailable (PgBouncer in transaction mode), or where the
	// poll interval is an acceptable delay and the listening connections
	// are not (many tenants per database).
	NotifyOff
)

// String returns "in-transaction", "after-commit" or "off".
func (m NotifyMode) String() string {
	switch m {
	case NotifyInTransaction:
		return "in-transaction"
	case NotifyAfterCommit:
		return "after-commit"
	case NotifyOff:
		return "off"
	}
	return "NotifyMode(" + strconv.Itoa(int(m)) + ")"
}

func (m NotifyMode) valid() bool { return m >= NotifyInTransaction && m <= NotifyOff }
