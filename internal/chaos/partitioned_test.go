package chaos_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outboxkit/postgres"
)

// The short run on the partitioned layout (hourly partitions of the
// outbox table, daily ones of the processed table,
// postgres.MigrateConfig.Partitions): the
// same faults, the same checks (every event applied exactly once by the
// consumer, none published twice under one lease).
func TestChaosShortPartitioned(t *testing.T) {
	if *long {
		t.Skip("-long given: TestChaosLong runs instead")
	}
	runScenario(t, scenario{
		relays: 2, batch: 20, rate: 100, faultEvery: 1200 * time.Millisecond, outage: 1500 * time.Millisecond,
		schedule: []faultKind{faultKillRelay, faultTerminate, faultRefuse, faultKillRelay, faultStorm, faultKillConsumer, faultTerminate},
		selfKill: 0.5, consumerCrashEvery: 400, hijackEvery: 100, drainTimeout: 40 * time.Second,
		partitions: postgres.PartitionHourly,
	})
}

// The short ordered run (the relay ordering the aggregates) on the
// partitioned layout.
func TestChaosOrderedPartitioned(t *testing.T) {
	if *long {
		t.Skip("-long given: TestChaosLongOrdered runs instead")
	}
	sc := orderedShort
	sc.relayOrdering, sc.partitions = true, postgres.PartitionHourly
	runOrdered(t, sc)
}
