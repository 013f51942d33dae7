// Package coretest holds the conformance suites every outboxkit adapter runs,
// and a FakeClock for driving time in tests.
//
// An adapter proves itself by calling the suite for each contract it
// implements from its own tests, declaring its optional capabilities:
//
//	func TestConformance(t *testing.T) {
//		coretest.TestStore(t, func(t *testing.T, opts coretest.StoreOptions) (core.Store, coretest.WriteFunc) {
//			s := mystore.New(...)            // fresh and isolated for each call
//			return s, s.Add
//		}, coretest.StoreFeatures{Stats: true})
//		coretest.TestDeduper(t, func(t *testing.T) core.Deduper { return mydeduper.New(...) })
//	}
//
// The Store suite drives time through ClaimRequest.Now and SettleRequest.Now
// (from a FakeClock), so a store must honour them. Cases include: claiming in
// order; an expired lease is claimable again; a settle with a stale lease
// token is refused; concurrent claimers never receive the same event under a
// live lease; retry backoff and MaxAttempts lead to dead-letter; and, when
// declared, per-aggregate head-of-line ordering, wake-ups, stats, replay and
// pruning.
package coretest
