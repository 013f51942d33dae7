-- Leases: one row per task that exactly one process among all those
-- sharing a table runs at a time (postgres.Retention's is
-- "<table>/retention"). The holder takes the row, renews it and hands it
-- back with one statement each, timed by the database's now(), so
-- leadership needs neither a session (no advisory lock: PgBouncer in
-- transaction mode keeps none) nor agreeing clocks. A holder that dies
-- leaves the row to expire at until; any other process then takes it.
-- One table per schema, shared by its outbox tables like
-- outboxkit_migrations.
CREATE TABLE IF NOT EXISTS {{.Schema}}.outboxkit_leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    until       timestamptz NOT NULL
);
