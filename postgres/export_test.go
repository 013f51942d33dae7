package postgres

import (
	"context"
	"time"
)

// Test hooks: the external tests EXPLAIN the statements the store runs, and
// observe after-commit notifications.

func (s *Store) ClaimSQLForTest() string        { return s.claimSQL }
func (s *Store) PublishSQLForTest() string      { return s.publishSQL }
func (s *Store) SettleSQLForTest() string       { return s.settleSQL }
func (s *Store) PruneSQLForTest() string        { return s.pruneSQL }
func (s *Store) AddSQLForTest() string          { return s.addSQL }
func (s *Store) DeleteSQLForTest() string       { return s.deleteSQL }
func (s *Store) SettleDeleteSQLForTest() string { return s.settleDeleteSQL }

func (s *Store) ClaimSlotSQLForTest() string { return s.claimSlotSQL }

// The settlements by row address.
func (s *Store) PublishTIDSQLForTest() string      { return s.byTID.publish }
func (s *Store) SettleTIDSQLForTest() string       { return s.byTID.settle }
func (s *Store) DeleteTIDSQLForTest() string       { return s.byTID.delete }
func (s *Store) SettleDeleteTIDSQLForTest() string { return s.byTID.settleDelete }

// WaitNotifiedForTest waits until no after-commit notification is in flight
// or owed, so that a test ends with no sender goroutine running.
func (s *Store) WaitNotifiedForTest(ctx context.Context) error { return s.waitNotified(ctx) }

// SetBeforeNotifyForTest installs f to run as each after-commit notification
// is about to be sent. Call it before the first Notify.
func (s *Store) SetBeforeNotifyForTest(f func()) { s.notifier.beforeSend = f }

// SetGrownForTest makes the store treat its table as grown past the young
// stage (plans.go), so its relay statements are prepared from the first
// call and a settlement and the next claim share one pipelined round trip.
func (s *Store) SetGrownForTest() { s.grown.Store(true) }

// ValidateCheckMaxBytesForTest is the table size up to which migration 006
// validates its check under the migration's lock.
const ValidateCheckMaxBytesForTest = validateCheckMaxBytes

// SetFloorFullEveryForTest sets how often the store looks for its claim
// floor from the beginning of the pending set (claimfloor.go); the next
// claim does so in any case.
func (s *Store) SetFloorFullEveryForTest(d time.Duration) {
	f := s.plans.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	f.every, f.nextFull = d, time.Time{}
}
