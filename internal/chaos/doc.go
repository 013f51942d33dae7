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
//     (found by application_name), and the listener's reconnection checked;
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
//	go test -race ./internal/chaos/                               # short suite, in make test
//	go test -race -v -run Long -timeout 20m ./internal/chaos/ -args -long   # make chaos
//
// The package also holds the poison-event tests (dead-lettered after
// MaxAttempts while healthy events keep flowing; with ordering, only the
// poison's aggregate waits), end-to-end bad-input tests, and fuzz targets
// for core's CloudEvents decoding. docs/GUARANTEES.md maps every promise to
// the test that proves it.
package chaos
