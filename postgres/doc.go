// Package postgres is outboxkit's PostgreSQL store, on pgx v5: the outbox
// table and its migrations, the writer's Add, the relay's side of core.Store
// (with wake-ups from the WAL or LISTEN/NOTIFY, stats, replay and
// retention), and a core.Deduper and a Sequencer for consumers.
//
// # Setup
//
// Run the migrations once per schema (at start-up is fine: they are
// idempotent and take an advisory lock), then build a Store on a pool:
//
//	if err := postgres.Migrate(ctx, pool, &postgres.MigrateConfig{Schema: "billing"}); err != nil { ... }
//	store, err := postgres.New(pool, &postgres.Config{Schema: "billing"})
//
// Teams that run their own migration tool print the script instead
// (MigrationSQL, or Migrator.SQL and Migrator.Migrations for each version's
// up and down files); it records the versions the same way, so Migrate and
// hand-applied scripts can be mixed. docs/SCHEMA.md shows the script and
// explains every column and index. Nothing is ever created implicitly,
// least of all inside a caller's transaction: an unmigrated schema fails with
// ErrNotMigrated. Store.Check (core.Checker, which Relay.Run calls before
// starting) tells at once whether the database answers and the schema is
// at the migration version this build needs, and what to run if not.
//
// Logs go to Config.Logger, by default slog.Default() at warn level.
//
// Schema and table names are configuration, so several tenants can share a
// database. They must be plain identifiers (letters, digits, underscores, not
// starting with a digit) and are always quoted with pgx.Identifier; anything
// else is refused with an *IdentifierError before any SQL is built.
//
// # Writing events
//
// Add takes the caller's transaction (any DBTX: pgx.Tx, *pgx.Conn,
// *pgxpool.Pool) so events commit or roll back with the business change:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "UPDATE orders SET status = 'confirmed' WHERE id = $1", id); err != nil {
//			return err
//		}
//		e, err := core.NewEvent("order.confirmed", order)
//		if err != nil {
//			return err
//		}
//		return store.Add(ctx, tx, e)
//	})
//
// Add validates every event before sending anything (an invalid batch leaves
// the transaction usable and writes nothing) and then costs one round trip
// whatever the batch size: a single INSERT (VALUES for one event, SELECT FROM
// unnest(...) for several). By default it sends no wake-up: relays learn
// of the commit from the WAL, or by polling (see "Waking relays").
//
// # database/sql, sqlx, GORM, bun, ent
//
// A service on database/sql passes its *sql.Tx through SQL, which adapts
// any database/sql handle (and the ORMs' transactions built on one) to the
// pgx types the methods take:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	if err := store.Add(ctx, postgres.SQL(tx), e); err != nil { ... }
//	err = tx.Commit()
//
// Every component also runs on a *sql.DB of its own (Handle): New,
// NewDeduper, NewSequencer, NewInbox and Migrate take one as they take a
// *pgxpool.Pool, with lib/pq or pgx's stdlib driver, and an effect gets
// the Deduper's *sql.Tx through SQLEffect. The SQL is the same; the
// adapter sends arguments in PostgreSQL's text form and scans with pgx's
// decoders (sqlconn.go). What a *sql.DB store lacks is what only pgx has:
// settlements pipelined with the next claim and a connection to wake
// from (give Config.WakeupURL, or it polls). docs/DATABASES.md has a
// snippet per library.
//
// Services in other languages write plain SQL; only three columns are
// required and the relay picks the row up like any other:
//
//	INSERT INTO billing.outbox_events (id, event_type, payload)
//	VALUES ('0190f3c4-8a2e-7c4b-9d1a-3f2e1b0c9d8e', 'order.confirmed', '{"order": 42}');
//	SELECT pg_notify('billing.outbox_events', '');  -- optional: wakes relays that LISTEN
//
// Use UUID v7 IDs where you can (new rows then land at the edge of the
// primary-key index); gen_random_uuid() is the column's default otherwise.
// No row's values can stop the relay: a row it cannot use (an attempts
// count at the integer limit, a nil ID, an empty type) is dead-lettered
// with the reason in last_error, and the others flow (docs/SCHEMA.md,
// "Rows from foreign writers").
// With per-aggregate ordering, also bump the aggregate's counter in the same
// transaction and store the result as sequence (docs/SCHEMA.md has the
// statement).
//
// # Relaying
//
// A Store is a core.Store: hand it to core.NewRelay. Claim leases due events
// in one statement (a subquery walks the partial index of pending rows with
// FOR UPDATE SKIP LOCKED; the UPDATE sets the lease token, expiry and attempt
// count, and returns the events). Settle records a whole batch's outcomes in
// one statement, only where the lease token still matches, and reports the
// others in a *core.LeaseLostError. "Now" is the database's now(), so relays
// on hosts with skewed clocks agree on lease expiry; a relay on a test clock
// passes its own time instead. A claim cut short after it reached the
// database (its context cancelled, the connection lost) may have committed
// there all the same: the store then gives back whatever it leased before
// returning the error, so nothing waits out a lease nobody holds.
//
// The store also implements core.Notifier (Listen), core.StatsReader,
// core.Replayer, core.Pruner and core.Checker (Check), and offers operators
// Get, DeadLetters and Purge.
//
// # Waking relays
//
// The table is the truth; wake-ups only tell relays to look now rather
// than at their next poll, and polling covers whatever a wake-up misses.
// Two settings decide them: Config.Wakeup, how a relay's store learns of
// new events, and Config.Notify, what writers send.
//
// By default writers send nothing (NotifyNone), so a wake-up costs them
// nothing, and relays (WakeupAuto):
//
//   - stream the outbox table's inserts by logical replication where the
//     server allows it: wal_level = logical, a role with REPLICATION (or
//     superuser) on the wake-up connection, and the publication
//     "outboxkit.<schema>.<table>" that migration 7 creates (it publishes
//     inserts only, and from PostgreSQL 15 the id column only). Each relay
//     holds one replication connection on a temporary slot, dropped by
//     the server when the connection ends, however it ends, so a dead
//     relay retains no WAL; the relay confirms what it received every
//     tenth of a second while messages flow, so the slot holds back no
//     more. Every commit that inserted into the table wakes the relay,
//     whoever wrote it (Add, plain SQL from another language).
//   - otherwise LISTEN, and say once in the log (a warning) why the
//     stream is unavailable and what would enable it. LISTEN hears only
//     writers that notify; the relay's polling finds the others, and it
//     polls fast while it keeps finding events that nobody announced
//     (core.RelayConfig.MinPollInterval, 1 ms), backing off to
//     PollInterval (1 s) as it stays idle.
//
// Each reconnection tries the stream again, so a server restarted with
// wal_level = logical, or a publication created by hand, is streamed from
// without restarting the relay. Config.Wakeup chooses otherwise:
// WakeupListen never streams (each stream decodes the whole database's
// WAL, a cost to weigh with many relays or heavy unrelated writes), and
// WakeupPoll opens no wake-up connection.
//
// Writers may still notify, for relays that LISTEN:
//
//   - NotifyInTransaction: Add's statement calls pg_notify inside the
//     caller's transaction, and the commit delivers it. PostgreSQL
//     serialises the commits of every transaction that issued NOTIFY
//     (PreCommit_Notify takes a cluster-wide lock and holds it until the
//     commit record is flushed), so with many concurrent writers an
//     in-transaction NOTIFY turns group commit into one WAL flush per
//     business transaction: measured at 8 writers, 0.30 × the same
//     transaction writing the outbox table by hand.
//   - NotifyAfterCommit: Add sends nothing; after the caller's COMMIT,
//     Store.Notify sends SELECT pg_notify in a transaction of its own,
//     coalesced per Store (at most one in flight, the next covering the
//     calls that arrive meanwhile) and paced at one per
//     Config.NotifyInterval (1 ms) with bursts of two. Store.InTx commits
//     and notifies; code that commits itself calls store.Notify() after
//     Commit. Measured at 8 writers: 0.94 × (each notification is a
//     transaction of its own, hence the pacing).
//   - NotifyOff: nothing is sent, and the store's Listen opens no
//     connection (as with WakeupPoll).
//
// docs/BENCHMARKS.md ("Wake-ups") gives the measured write throughput,
// latency and idle cost of each combination.
//
// Writers of one table may mix modes; a relay's store ignores its own
// Notify except that NotifyOff stops its Listen.
//
//	store, _ := postgres.New(pool, &postgres.Config{Schema: "billing", Notify: postgres.NotifyAfterCommit})
//	err := store.InTx(ctx, pool, func(tx pgx.Tx) error {
//		// ... business writes through tx ...
//		return store.Add(ctx, tx, e)
//	})
//
// The wake-up connection is dedicated (outside the pool) and reconnects
// with capped backoff, waking the relay after every reconnect because
// what was written meanwhile was not announced. It needs a session of its
// own: a pool behind PgBouncer in transaction mode cannot hold a LISTEN,
// and a replication connection cannot pass PgBouncer at all, so give
// relays behind PgBouncer Config.WakeupURL, a connection string straight
// to PostgreSQL (its role needs REPLICATION for the stream). Without it,
// a relay whose pool goes through such a pooler says so once (a warning)
// and polls, rather than LISTEN into the void.
//
// # PgBouncer
//
// Open the pool with NewPool instead of pgxpool.New: through a pooler it
// runs statements unnamed (default_query_exec_mode=cache_describe), which
// PgBouncer before 1.21 requires in transaction mode; directly it is
// pgxpool.New's pool. The store's statements, its migrations (a
// transaction-scoped advisory lock) and the deduper are transaction-bound
// and work through it; a pool that prepares statements there fails with
// ErrPreparedStatementLost, which says what to change.
//
// # Ordering
//
// With Config.Ordering, Add numbers each aggregate's events from a counter
// row (table <table>_aggregates) bumped in the same statement, and Claim only
// hands out an aggregate's head: its lowest pending sequence, never while an
// earlier event of the aggregate is leased. A failing head holds back its own
// aggregate only; a dead-lettered head no longer blocks it. Writers of one
// aggregate serialise on its counter row until they commit, so sequences
// become visible in order. Under REPEATABLE READ or SERIALIZABLE, two
// concurrent writers of one aggregate make one fail with a serialization
// error: retry it, as for any serializable transaction.
//
// # Consumers
//
// Deduper records (consumer, event ID) in the same transaction as the
// effect; the effect reaches that transaction with TxFromContext, or is
// written as an Effect:
//
//	h := core.ChainHandler(postgres.Effect(func(ctx context.Context, tx pgx.Tx, e core.Event) error {
//		_, err := tx.Exec(ctx, "INSERT INTO ledger ...")
//		return err
//	}), core.Idempotent(deduper, "billing"))
//
// A consumer that already holds a transaction joins it with
// Deduper.OnceTx(ctx, tx, key, effect): the record and the effect go in a
// savepoint of tx, so a duplicate or a failed effect leaves tx usable, and
// nothing is durable until the caller commits tx.
//
// # Consumer-side order
//
// Sequencer is a Deduper that also applies each aggregate's events in
// order, per consumer (core.SequencedDeduper): pass it wherever a Deduper
// goes (qstash.ReceiverConfig.Deduper, core.Idempotent) and core.ApplyOnce
// orders every event with an aggregate ID and a sequence (written with
// Config.Ordering). Per (consumer, aggregate) it keeps the last applied
// sequence L in <table>_sequences, advanced in the effect's transaction:
//
//   - sequence <= L: stale or repeated, acknowledged without effect (false,
//     nil; logged at debug level, counted in Stats);
//   - sequence L+1: applied, L moves to it in the same commit;
//   - beyond L+1: a gap, answered with an error matching
//     core.ErrSequenceGap, with a RetryAfter hint (GapRetryAfter, 1 s, growing
//     to a quarter of the gap's age, at most 30 s, as it lasts), so
//     qstash.Receiver answers 503 with Retry-After and the transport
//     redelivers it.
//
// The first sighting of a gap is recorded in <table>_sequence_gaps, outside
// the rolled-back transaction, and deleted when the gap closes. After
// GapAlertAfter (1 min) the Sequencer warns once per gap. The GapPolicy
// decides what happens after GapTimeout (10 min): GapWait (the default)
// keeps waiting, bounded by the transport's retries; GapPark records the
// event in <table>_sequence_parked and answers Permanent, so the transport
// dead-letters it where operators see it; GapApplyAnyway applies it and
// the skipped predecessors become stale.
//
// An aggregate the consumer has never seen waits for sequence 1, which is
// safe but blocks consumers deployed after their producers' first events
// (or after those events were pruned) for good; StartAtFirstSeen starts
// such an aggregate at the first sequence delivered instead.
//
//	seq, err := postgres.NewSequencer(pool, &postgres.SequencerConfig{GapPolicy: postgres.GapPark})
//	rc, err := qstash.NewReceiver(&qstash.ReceiverConfig{Deduper: seq, Consumer: "billing", ...})
//
// Deliveries of one aggregate serialise on its row; the next event in
// order costs what Deduper.Once costs (BEGIN, one statement, the effect,
// COMMIT), and sequenced events write no processed row. OnceInOrderTx joins
// a caller's transaction in a savepoint, as OnceTx does.
//
// # Diagnosis
//
// Reconcile answers "was every committed event applied by this
// consumer?": for a time window it joins the published events with the
// consumer's processed records (in the same database or another), in
// keyset pages and bounded memory, optionally asking the transport
// (TransportLog) what became of the missing ones, and reports applied,
// missing past a grace period, phantoms (applied, never published) and
// dead letters. Doctor answers "why is the outbox slow or stuck?": it
// checks the xmin horizon, idle transactions, replication slots,
// autovacuum, bloat, the pending index, generic plans, indexes, clock skew
// and migrations, and says what to do about each finding. CheapChecks are
// the catalog-only subset the relay service's /readyz and the dashboard
// run every 30 s. outboxctl reconcile and outboxctl doctor are their
// commands.
//
// # Tuning
//
//   - Batch size and concurrency are the relay's (core.RelayConfig). Bigger
//     batches amortise round trips; each claim and each settle is one
//     statement whatever the size.
//   - DeletePublished deletes rows on publish instead of keeping them: the
//     fastest drain, but nothing to inspect or replay afterwards.
//   - Otherwise let a Retention prune published rows (and processed
//     records) past their horizon: every relay process may run one; a
//     lease row (migration 009) makes exactly one of them prune at a time,
//     in bounded, paced batches, handing over within a lease when it dies,
//     behind PgBouncer and on database/sql alike. Dead letters and pending
//     rows are never deleted. outboxctl relay runs one per tenant. Prune is
//     the same deletion for a cron job. The table and its primary key stay
//     small; the pending index never holds published rows, so claims do
//     not slow down with history either way.
//   - The partitioned layout (MigrateConfig.Partitions: PartitionDaily,
//     PartitionHourly or, for retentions of minutes, PartitionMinutes(m);
//     ConvertToPartitioned converts a plain table online) retires a whole
//     period at once, keeping events up to one period past the retention:
//     the same Retention, as leader, creates the periods ahead and drops
//     a partition once nothing in it is pending and everything was
//     published before the horizon, its dead letters moved to the default
//     partition first (Partitions). A drop costs the same whatever the
//     partition held and leaves no dead rows; a claim costs a little more
//     per period kept, so keep retention / period modest. The processed
//     table is partitioned by day whatever the outbox table's period: its
//     records are kept for days (RetainProcessed), and periods of minutes
//     would make thousands of partitions of it. Between its passes the
//     leader also vacuums the partitions the settlements leave dead rows
//     in (Partitions.Vacuum, every RetentionConfig.VacuumInterval, 10s),
//     rather than waiting for autovacuum's minute while the claims walk
//     past them.
//     docs/SCHEMA.md, "The partitioned layout", says what differs.
//   - The table has fillfactor 40 (migration 004) so every lease update
//     stays on its page: touching no indexed column, it is then a HOT update
//     that adds no index entries, and the claim returns each row's address
//     (ctid), which Settle uses to find the rows by TID scan instead of a
//     primary-key probe per event. An address is only a hint: a table
//     rewrite under a live lease (VACUUM FULL, CLUSTER, pg_repack) can put
//     another row of the same lease there, so every settlement also
//     matches the event ID and the lease token, and events not found at
//     their address are settled again by ID. A claim leases a page's rows
//     together, so at fillfactor 80 only about one lease in five fitted
//     and the rest inserted into every index: 40 halves the database's
//     work per claimed event. Pages written before
//     the migration keep their layout until rewritten. The table also has
//     autovacuum_vacuum_scale_factor 0.02: settled rows leave dead
//     entries at the head of the pending index that claims step over until
//     VACUUM removes them. Very busy outboxes may want autovacuum_naptime
//     lowered too (a server setting).
//   - Under a backlog, claims go by slot (migration 005; see Store.Claim), so
//     relays sharing a table do not all walk the same rows: a batch is then
//     oldest-first within its slot, not across the whole table. Ordering
//     and Destination claims never use slots.
//   - Plans: the relay's statements are planned per execution (unnamed
//     statements) until a claim returns a row at insertion position 4,096
//     or beyond, then prepared. A generic plan made on a small table scans
//     it whole and is kept as the table grows unless ANALYZE runs; this
//     keeps such plans from being made (plans.go explains, and
//     docs/OPERATIONS.md rule 7 says what is left to operators). Only a pool
//     in pgx's default mode (cache_statement) is affected; other modes
//     never prepare.
//   - Wake-ups: enable logical replication (wal_level = logical, a
//     REPLICATION role, WakeupURL past PgBouncer) for the lowest latency
//     at no cost to writers; without it, MinPollInterval and PollInterval
//     trade latency against idle claims (see "Waking relays").
//   - MaxPayloadBytes (1 MiB by default, QStash's smallest plan limit) refuses
//     large payloads up front: store large data elsewhere and send a
//     reference.
package postgres
