-- attempts counts claims; only the store writes it, and never below zero.
-- A foreign writer can store anything, though: a negative count bought its
-- event extra retries before MaxAttempts dead-lettered it. Rows written
-- before this migration start again at 0; the check refuses new ones.
--
-- The repair runs first, taking only the locks of the rows it changes, so
-- writers go on while it scans. The check is then added NOT VALID, which
-- is instant and enforced for every row written or updated from here on,
-- and validated at once only on a table small enough to scan quickly: the
-- migration's transaction holds the table's ACCESS EXCLUSIVE lock from the
-- ALTER TABLE until it commits, so validating a large table here would
-- stop writers for the whole scan. A large table's check stays NOT VALID
-- until an operator runs
--     ALTER TABLE <table> VALIDATE CONSTRAINT <table>_attempts_check;
-- in a transaction of its own, which does not block reads or writes. Either
-- way the store relies on nothing but the rows it writes: every claim,
-- settlement and replay writes a count of at least 0.
UPDATE {{.Outbox}} SET attempts = 0 WHERE attempts < 0;
ALTER TABLE {{.Outbox}} ADD CONSTRAINT {{.AttemptsCheck}} CHECK (attempts >= 0) NOT VALID;
DO $outboxkit$ BEGIN
    IF pg_relation_size('{{.Outbox}}') <= {{.ValidateMaxBytes}} THEN
        ALTER TABLE {{.Outbox}} VALIDATE CONSTRAINT {{.AttemptsCheck}};
    END IF;
END $outboxkit$;
