DO $outboxkit$
DECLARE
    qualified text;
    pub text;
BEGIN
    SELECT n.nspname || '.' || c.relname INTO qualified
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = '{{.Outbox}}'::regclass;
    pub := 'outboxkit.' || qualified;
    IF octet_length(pub) > 63 THEN
        pub := 'outboxkit_' || left(encode(sha256(convert_to(qualified, 'UTF8')), 'hex'), 24);
    END IF;
    EXECUTE format('DROP PUBLICATION IF EXISTS %I', pub);
END $outboxkit$;
