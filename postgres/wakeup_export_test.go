package postgres

// Test hooks of the wake-ups.

// WakeupSlotPrefixForTest starts the names of the store's temporary
// replication slots, so a test can find them in pg_replication_slots.
func (s *Store) WakeupSlotPrefixForTest() string { return s.wakeups.slotPrefix }

// PublicationNameForTest is the name of the publication migration 7
// creates for schema.table.
func PublicationNameForTest(schema, table string) string { return publicationName(schema, table) }
