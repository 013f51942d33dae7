-- The publication the relays' WAL wake-ups stream (postgres/wal.go): the
-- outbox table's inserts, nothing else. Creating a publication needs
-- ownership of the table and CREATE on the database, rights relays should
-- not need, so the migration creates it and relays only read it.
--
-- It is named after the table, "outboxkit.<schema>.<table>" (hashed when
-- longer than 63 bytes), because publications belong to the database, not
-- to a schema. From PostgreSQL 15 it publishes the id column only: the
-- stream is a wake-up, and a wider row would only be sent to be thrown
-- away.
--
-- The partitioned layout's publication publishes through the partitioned
-- table (publish_via_partition_root), so the stream names the outbox table
-- whichever partition a row went to, and partitions created later are in
-- it without a change to the publication.
--
-- A role that may not create it (not the table's owner, or without CREATE
-- on the database) gets a warning and the migration goes on: relays then
-- wake by LISTEN and polling, and say at start what to run to enable the
-- stream.
DO $outboxkit$
DECLARE
    qualified text;
    owner oid;
    pub text;
BEGIN
    SELECT n.nspname || '.' || c.relname, c.relowner INTO qualified, owner
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = '{{.Outbox}}'::regclass;
    pub := 'outboxkit.' || qualified;
    IF octet_length(pub) > 63 THEN
        pub := 'outboxkit_' || left(encode(sha256(convert_to(qualified, 'UTF8')), 'hex'), 24);
    END IF;
    IF EXISTS (SELECT FROM pg_publication WHERE pubname = pub) THEN
        -- A publication of this name that lacks the table was left behind
        -- by a dropped schema (DROP SCHEMA ... CASCADE removes the table
        -- from its publications but keeps them): it publishes nothing, so
        -- point it at the table again rather than keep it.
        IF NOT EXISTS (SELECT FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid
                       WHERE p.pubname = pub AND r.prrelid = '{{.Outbox}}'::regclass) THEN
            BEGIN
                IF current_setting('server_version_num')::int >= 150000 THEN
                    EXECUTE format('ALTER PUBLICATION %I SET TABLE %s (id)', pub, '{{.Outbox}}');
                ELSE
                    EXECUTE format('ALTER PUBLICATION %I SET TABLE %s', pub, '{{.Outbox}}');
                END IF;
                EXECUTE format('ALTER PUBLICATION %I SET (publish = %L, publish_via_partition_root = true)', pub, 'insert');
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE WARNING 'outboxkit: publication % exists without % and this role may not alter it: run ALTER PUBLICATION % SET TABLE % (id) as its owner; relays wake by LISTEN and polling until then', quote_ident(pub), '{{.Outbox}}', quote_ident(pub), '{{.Outbox}}';
            END;
        END IF;
        RETURN;
    END IF;
    IF NOT pg_has_role(owner, 'USAGE') OR NOT has_database_privilege(current_database(), 'CREATE') THEN
        RAISE WARNING 'outboxkit: publication % not created: it needs the owner of % with CREATE on the database; relays wake by LISTEN and polling until it exists', quote_ident(pub), '{{.Outbox}}';
        RETURN;
    END IF;
    IF current_setting('server_version_num')::int >= 150000 THEN
        EXECUTE format('CREATE PUBLICATION %I FOR TABLE %s (id) WITH (publish = %L, publish_via_partition_root = true)', pub, '{{.Outbox}}', 'insert');
    ELSE
        EXECUTE format('CREATE PUBLICATION %I FOR TABLE %s WITH (publish = %L, publish_via_partition_root = true)', pub, '{{.Outbox}}', 'insert');
    END IF;
END $outboxkit$;
