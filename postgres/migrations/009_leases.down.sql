-- The leases table is shared by the schema's outbox tables: forget this
-- table's leases ("<table>/..."), and drop the table with the last outbox
-- table whose migrations created it (this table's version row is still
-- there while its down script runs).
DO $outboxkit$
DECLARE
    tbl text := (SELECT c.relname FROM pg_class c WHERE c.oid = '{{.Outbox}}'::regclass);
BEGIN
    DELETE FROM {{.Schema}}.outboxkit_leases WHERE left(name, length(tbl) + 1) = tbl || '/';
    IF (SELECT count(*) FROM {{.Schema}}.outboxkit_migrations WHERE version = 9) <= 1 THEN
        DROP TABLE {{.Schema}}.outboxkit_leases;
    END IF;
END $outboxkit$;
