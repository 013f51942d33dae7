ALTER TABLE {{.Outbox}} SET (fillfactor = 80);
