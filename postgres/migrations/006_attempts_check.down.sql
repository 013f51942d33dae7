ALTER TABLE {{.Outbox}} DROP CONSTRAINT IF EXISTS {{.AttemptsCheck}};
