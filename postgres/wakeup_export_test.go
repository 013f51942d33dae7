package postgres

import "time"

// Test hooks of the wake-ups.

// WakeupSlotPrefixForTest starts the names of the store's temporary
// replication slots, so a test can find them in pg_replication_slots.
func (s *Store) WakeupSlotPrefixForTest() string { return s.wakeups.slotPrefix }

// PublicationNameForTest is the name of the publication migration 7
// creates for schema.table.
func PublicationNameForTest(schema, table string) string { return publicationName(schema, table) }

// SetBusyLimitsForTest makes the store's WAL stream pause after d of
// commits at rate a second or more, for pause.
func (s *Store) SetBusyLimitsForTest(rate float64, d, pause time.Duration) {
	s.wakeups.busy.rate, s.wakeups.busy.span, s.wakeups.busy.pause = rate, d, pause
}

// SetWALCostLimitsForTest makes the store's WAL stream pause, for pause,
// after d of WAL at bytesPerSecond or more.
func (s *Store) SetWALCostLimitsForTest(bytesPerSecond float64, d, pause time.Duration) {
	s.wakeups.busy.walRate, s.wakeups.busy.walSpan, s.wakeups.busy.walPause = bytesPerSecond, d, pause
}
