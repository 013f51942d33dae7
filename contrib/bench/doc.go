// Command bench is outboxkit's comparative benchmark harness: it runs the
// workloads of the benchmark protocol (shared BENCH.md, summarised in
// docs/BENCHMARKS.md) against one PostgreSQL, side by side in one run, and
// prints the medians of several repetitions with their ratios.
//
//	go run ./contrib/bench                       # everything, 3 repetitions
//	go run ./contrib/bench -workloads drain -events 20000 -reps 1
//	go run ./contrib/bench -json > results.json  # the table goes to stderr
//
// Systems compared, each draining into the same kind of in-process counting
// sink:
//
//   - outboxkit: core.Relay over postgres.Store (leases, fencing and
//     per-event outcomes intact);
//   - watermill: Watermill's forwarder (components/forwarder) over
//     watermill-sql v4 with DefaultPostgreSQLSchema and its offsets adapter,
//     the same batch size (SubscribeBatchSize) and a 10 ms poll;
//   - ceiling: the one-statement claim-and-mark run by the same Go client
//     with two workers. It takes no lease, so it is not a valid relay: it
//     bounds what any relay can do on this database;
//   - River (river.go, -river): riverqueue/river over riverpgxv5, jobs
//     inserted with InsertTx (InsertManyFast for the drain's backlog) and
//     worked by a no-op worker, with its defaults (MaxWorkers 100) and
//     tuned for throughput (-river-workers, -river-cooldown, -river-poll),
//     its tables created by rivermigrate in a schema of their own.
//
// The write workload also compares, with a business INSERT in each
// transaction, the seed article's outbox table written by hand (the
// baseline of the targets), outboxkit's Add with its defaults and River's
// InsertTx, the libraries with their consumers running (write_insert.go).
//
// With -databasesql (databasesql.go) the write and drain workloads also
// run through database/sql, with lib/pq (its defaults, and
// binary_parameters=yes) and with pgx's stdlib driver:
// writers commit a *sql.Tx with the event added through postgres.SQL(tx),
// and the relay drains a Store on a *sql.DB, beside the pgx cases of the
// same run, with the ratios of each to pgx.
//
// The idle workload (idle.go) measures what a relay with nothing to relay
// costs PostgreSQL: outboxkit's defaults (the WAL stream where wal_level is
// logical), WakeupListen and WakeupPoll, each on an empty outbox, the CPU
// time of every backend the relay opened (pool and wake-up connection,
// found by application_name) over -idle-duration, as a percentage of one
// core. The growth workload (growth.go) drains a backlog of -events beside
// one of -growth-events and one of -events beside -growth-retained
// published rows kept unvacuumed, and records events/s, PostgreSQL CPU per
// event and the claim indexes' pages read per event.
//
// The consumer workload (consumer.go) serves a real qstash.Receiver over
// loopback HTTP three ways: with postgres.Deduper (the plain receiver),
// with postgres.Sequencer (100 aggregates, each one's deliveries in
// sequence order) and as an inbox receiver (qstash.NewInboxReceiver over
// postgres.Inbox, its workers applying the same one-row effect during the
// run). Signed structured-mode deliveries, signed before the clock starts,
// are sent paced at -consumer-rates for -consumer-duration and then closed
// loop by -consumer-closed senders; it records send → response latency,
// the receiver's (and the inbox workers') PostgreSQL CPU per delivery and
// the throughput at saturation, beside the plain receiver's.
//
// Workloads (-workloads, comma-separated): drain, latency, write,
// consumer, idle, growth, qstash, scaleout. Each trial creates its own schema (bench_<random>) and drops it
// afterwards; nothing else in the database is touched, except that every
// measurement starts after a CHECKPOINT (the write workload's before each
// run, the others' after the preload), so none starts with dirty pages an
// earlier step left for a timed checkpoint to flush in the middle of it.
//
// The scale-out workload starts relay processes by re-executing this program
// with the hidden -role relay flag; each records (event ID, lease token) for
// every event it publishes, and the parent checks that no event was published
// twice under one lease.
//
// Besides throughput and latency, every drain records CPU time per event on
// both sides (this process, and the PostgreSQL backends of the system's own
// connections): on a shared 2-core machine it moves far less than wall-clock
// figures do. A trial during which PostgreSQL restarted (the server is shared
// with the chaos suite) is run again, and the report says so.
//
// Two workloads run only when named (make partitions-bench, make
// partition-soak): partitions (partitions.go), the partitioned layout
// beside the plain one, each drained and paced on an empty table and on
// one keeping -partition-retained published rows (vacuumed between its
// trials, so each starts with no dead rows, as an empty one does), and a
// day of -partition-retire rows retired by dropping its partition against
// batched DELETE; and partition-soak (partition_soak.go), both layouts
// written and relayed at -soak-rate with a short retention for
// -soak-duration, one after the other, their size and dead rows sampled.
// scripts/partition-soak-autovacuum.sh runs the soak on a scratch cluster
// with autovacuum on, as a production server has it.
//
// -proposals adds prototypes of proposed store and relay changes
// (proposal.go), measured beside the real thing; see
// docs/BENCHMARKS.md.
//
// -capacity and -sizing (capacity.go) are the capacity model's
// measurements instead of the workloads: per-event PostgreSQL CPU, WAL
// bytes (pg_walinspect, the measurement's own relations) and round trips
// of the writer's Add, of the relay at each batch size, wake-up mode and
// transport (the relay in a process of its own, -role capacity-relay), of
// the consumer side and of retention; then the model's prediction for
// -cores, -cpu-share and -events-per-second. -capacity-inputs re-runs the
// model on a saved report. docs/SCALING.md is the model and its
// validation.
package main
