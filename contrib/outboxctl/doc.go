// Command outboxctl operates an outboxkit outbox on PostgreSQL: it applies
// migrations, runs relays, checks health, and manages dead letters, replays
// and retention.
//
// Until the module is published, install it from a clone, at the
// repository's root (README.md, Install):
//
//	git clone https://github.com/outboxkit/outboxkit && cd outboxkit
//	go install ./contrib/outboxctl
//
// Once it is published:
//
//	go install github.com/outboxkit/outboxkit/contrib/outboxctl@latest
//
// # Usage
//
//	outboxctl [global flags] <command> [flags]
//
//	migrate [--print [--down]]      apply the migrations, or print their SQL
//	migrate --partitions daily      the partitioned layout (daily, hourly, 15m): create it, or convert a plain table online
//	migrate status [--json]         list migrations and whether each is applied
//	migrate down --to N --yes       revert migrations newer than N
//	relay [flags]                   relay events until SIGINT/SIGTERM (or once, with --drain)
//	status [--json] [--max-age D]   counts and oldest pending age; a health check with --max-age
//	dlq list|show|replay|purge      inspect and act on dead-lettered events
//	replay [filters]                put published or dead events back to pending, IDs kept
//	prune --older-than D            delete old published events (and processed records); 0s needs --yes;
//	                                partitioned tables: drop retired partitions first, as retention does
//	qstash-dev [--addr A]           run the in-memory QStash for local development
//
// Every command documents its flags under --help. Global flags
// (--database-url, --schema, --table) may come before or after the command
// name, and default to DATABASE_URL, OUTBOX_SCHEMA ("public") and
// OUTBOX_TABLE ("outbox_events"). Without any database URL outboxctl uses
// the local development database, postgres://postgres@127.0.0.1:5432/test,
// and warns on stderr that it does: production jobs must set DATABASE_URL.
//
// # Output and exit codes
//
// Results go to stdout (--json where a script reads them), logs and errors
// to stderr. An error is one line, "outboxctl: <what happened>: <what to
// do>", with passwords and tokens redacted; never a stack trace. Exit codes
// are 0 for success, 1 when a check failed (status --max-age found the
// oldest pending event too old), and 2 for every error (bad flags,
// unreachable services, failed operations, a schema that lacks migrations,
// which status reports too), so a probe can tell an unhealthy outbox from a
// broken check.
//
// On a terminal, prune and replay draw a progress line; otherwise they print
// a plain line at most once a second.
//
// # Relays
//
//	outboxctl relay --destination https://billing.example.com/qstash/orders
//	outboxctl relay --transport nats --nats-url nats://nats:4222 --routes routes.txt
//	outboxctl relay --transport amqp --amqp-url amqp://user:pass@rabbit:5672/
//
// A relay runs until SIGINT or SIGTERM, then stops claiming, gives in-flight
// publishes --shutdown-timeout to finish and releases the events of the
// others, so no event waits for a dead process's lease. Run as many relays
// as you need: leases and FOR UPDATE SKIP LOCKED keep them apart without
// coordination. docs/OPERATIONS.md covers tuning, alerting and the rest.
//
// # The relay service
//
// A running relay serves /metrics (Prometheus), /healthz and /readyz on
// --http-addr (default :9464), exports traces and metrics over OTLP when
// the OTEL_* variables name an endpoint, relays many tenants (--schemas
// a,b,c or '*', databases from a --config YAML file), waits for its
// dependencies at start with --wait, and prunes old rows (--retain-published
// 7d, --retain-processed 30d) from one relay per table at a time; on a
// partitioned table that leader also vacuums the partitions the settled
// events leave dead rows in (--vacuum-interval 10s).
//
// Its metric names are stable; alert rules and dashboards use them. From
// the tracing package's instruments, each labelled database (host:port/name,
// no credentials), schema and table:
//
//	outboxkit_events_pending                     gauge
//	outboxkit_events_leased                      gauge
//	outboxkit_events_oldest_pending_age_seconds  gauge
//	outboxkit_events_dead_lettered               gauge
//	outboxkit_events_settled_total               counter, outboxkit_outcome, cloudevents_event_type, messaging_system
//	outboxkit_events_unsettled_total             counter, outboxkit_outcome, error_type
//	outboxkit_events_attempts                    histogram, outboxkit_outcome
//	outboxkit_publish_duration_seconds           histogram, outboxkit_publish_result
//	outboxkit_settle_errors_total                counter, error_type
//
// (outboxkit_events_duplicates_total is the consumers' Deduper's, not the
// relay's.) The service's own:
//
//	outboxctl_ready                                   gauge: 1 when /readyz answers 200
//	outboxctl_tenant_ready                            gauge per tenant (database, schema, table)
//	outboxctl_tenant_failures_total                   counter per tenant: stops and failed starts, each retried
//	outboxctl_database_up                             gauge per database
//	outboxctl_transport_up                            gauge, transport
//	outboxctl_retention_leader                        gauge per tenant: 1 where this process prunes
//	outboxctl_retention_deleted_total                 counter per tenant, kind=published|processed
//	outboxctl_retention_passes_total                  counter per tenant, result=ok|failed
//	outboxctl_retention_backlog_seconds               gauge per tenant, kind (the leader's)
//	outboxctl_retention_last_pass_timestamp_seconds   gauge per tenant
//	outboxctl_retention_partitions_created_total      counter per tenant (partitioned layout)
//	outboxctl_retention_partitions_dropped_total      counter per tenant (partitioned layout)
//	outboxctl_retention_dead_letters_moved_total      counter per tenant (partitioned layout)
//	outboxctl_retention_vacuums_total                 counter per tenant: partitions the leader vacuumed (partitioned layout)
//	outboxctl_retention_vacuum_time_seconds_total     counter per tenant: time the leader spent vacuuming (partitioned layout)
//	outboxctl_partitions_ahead_seconds                gauge per tenant: until the newest partition ends
//
// plus target_info and the Go and process collectors (go_*, process_*).
//
// # Inboxes
//
// A consumer's inbox (postgres.Inbox) is an outbox table of its own,
// "<consumer>_inbox" by default, so every command works on it with
// --table (or OUTBOX_TABLE):
//
//	outboxctl migrate --table billing_inbox
//	outboxctl status --table billing_inbox --max-age 5m
//	outboxctl dlq list --table billing_inbox
//	outboxctl dlq replay --table billing_inbox --id 0190...
//	outboxctl prune --table billing_inbox --older-than 7d --processed
//
// Its dead letters are events the handler failed on; a replay hands them
// to the inbox's workers again. Replaying a published inbox event runs it
// through the workers' Deduper, which drops it as already applied unless
// its processed record (billing_inbox_processed, which prune --processed
// prunes) is gone. The inbox's workers run in the consumer's own process
// (Inbox.Run), not under outboxctl relay.
package main
