package postgres

import "strconv"

// WakeupMode says how a relay's store learns that events were written
// (Config.Wakeup), so that the relay claims them without waiting for its
// poll. Whatever the mode, the table is the truth: a wake-up is a hint,
// and the relay's polling covers every gap.
type WakeupMode int

const (
	// WakeupAuto streams the outbox table's inserts from PostgreSQL's
	// logical replication (a temporary slot on the publication that
	// migration 7 creates) when the server and the role allow it, and
	// otherwise LISTENs for writers' notifications, saying once in the
	// log why the stream is unavailable and what would enable it. The
	// stream needs nothing from writers; LISTEN only hears writers that
	// notify (NotifyInTransaction, NotifyAfterCommit), and the relay's
	// adaptive polling finds the others. It is the default.
	WakeupAuto WakeupMode = iota

	// WakeupListen only LISTENs, never opening a replication stream: for
	// servers where each stream's decoding of the database's WAL is a cost
	// to avoid (many relays, heavy unrelated write traffic), with writers
	// that notify.
	WakeupListen

	// WakeupPoll opens no wake-up connection: Listen waits for its context
	// and relays find events by polling alone.
	WakeupPoll
)

// String returns "auto", "listen" or "poll".
func (m WakeupMode) String() string {
	switch m {
	case WakeupAuto:
		return "auto"
	case WakeupListen:
		return "listen"
	case WakeupPoll:
		return "poll"
	}
	return "WakeupMode(" + strconv.Itoa(int(m)) + ")"
}

func (m WakeupMode) valid() bool { return m >= WakeupAuto && m <= WakeupPoll }
