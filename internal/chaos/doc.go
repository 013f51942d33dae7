// Package chaos is outboxkit's fault-injection suite. Its tests drive real
// processes against the local PostgreSQL and an in-process qstashdev while a
// producer writes orders and their events at a steady rate: relay processes
// (cmd/chaosrelay: postgres store → core.Relay → qstash.Publisher) and a
// consumer process (cmd/chaosconsumer: qstash.Receiver → postgres Deduper →
// an effects table), both built once by the test.
//
// Faults injected, each while events flow:
//
//   - relays SIGKILLed at random moments and right after a publish the
//     transport accepted (before settling), then restarted;
//   - pg_terminate_backend on the relays' connections, LISTEN included
//     (found by application_name), and the listener's reconnection checked
//     (within 45 s of the fault, or of the end of a pause the relay logged:
//     its WAL stream stays closed for a minute while the database writes
//     WAL faster than is worth decoding, which other test packages running
//     at the same time can cause);
//   - the transport down (connection refused) and answering 503 storms,
//     some of them after QStash accepted the request (a lost answer);
//   - the consumer killed, or its connection dropped, after its effect
//     committed and before it answered;
//   - in the long suite only, a PostgreSQL restart in immediate mode.
//
// Each run then checks, from the database: no committed event lost, every
// effect applied exactly once, no effect or publish for a rolled-back
// transaction, every outbox row published or dead-lettered; and it reports
// redeliveries against their bound, one batch per relay crash.
//
// TestChaosShortThroughPgBouncer runs the short suite with the
// migrations, the producer and the relays behind PgBouncer in transaction
// mode (pgtest.BouncerURL, pools from postgres.NewPool; relays started
// with -new-pool) and the relays' wake-ups past it (-wakeup-url, the
// direct URL); it checks from PgBouncer's admin console that the relays
// were its clients. The consumer and the checks stay direct.
//
//	go test -race ./internal/chaos/                               # short suite, in make test
//	go test -race -v -run Long -timeout 20m ./internal/chaos/ -args -long   # make chaos
//
// The ordered suite (ordered_test.go: TestChaosOrdered, short, 100
// aggregates × 10 events; TestChaosLongOrdered, under -long, 200 × 50)
// proves consumer-side order under the same faults. A producer writes each
// aggregate's events 1 to 4 per transaction (every 10th rolled back), the
// store assigning sequences; relays publish them with their own ordering
// off (an aggregate's events published concurrently, in any order) and,
// in a second run, on; qstashdev delivers four at a time to the consumer
// started with -ordered: a qstash.Receiver whose Deduper is a
// postgres.Sequencer (GapPark after a minute), whose effect records
// (aggregate, sequence, event ID) in ordered_effects after checking, in the
// effect's transaction, that the previous sequence is there. Relays and the
// consumer are SIGKILLed (at random, after a publish, after a commit), the
// consumer drops connections after committing and answers 503 before
// reading one delivery in 15, and the transport refuses or answers 503
// storms. The run counts the adversity from the consumer's reports (gaps:
// deliveries ahead of their predecessor; stale: repeated ones; 503s) and
// the kills, and fails unless each happened; then it checks from the
// database that every aggregate's effects are its sequences 1..N, once
// each, committed in sequence order, that the Sequencer's last sequence is
// each aggregate's last, and that nothing is pending, dead-lettered,
// parked or waiting in an open gap. A self-test breaks the data (an effect
// missing, one applied twice, two swapped, an event parked, one pending)
// and expects the check to count each.
//
// The package also holds the poison-event tests (dead-lettered after
// MaxAttempts while healthy events keep flowing; with ordering, only the
// poison's aggregate waits), end-to-end bad-input tests, and fuzz targets
// for core's CloudEvents decoding. docs/GUARANTEES.md maps every promise to
// the test that proves it.
package chaos
