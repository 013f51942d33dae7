-- Consumer side: one row per (consumer, event) whose effect was applied,
-- written in the same transaction as the effect. Partitioned by event ID:
-- the primary key must hold the partition key, and the event ID is the
-- one column of the key that says when: a UUID v7 (core.NewID) starts
-- with its millisecond timestamp, so each partition covers the events
-- created in one period ({{.ProcessedInterval}}, UTC: a day whatever the
-- outbox table's period, since records are kept for days). The key stays
-- (consumer, event_id), so a redelivery finds its record whenever it
-- comes. Other IDs (random UUIDs, a plain-SQL writer's
-- gen_random_uuid()) fall where their first bytes say, mostly in the
-- default partition.
CREATE TABLE IF NOT EXISTS {{.Processed}} (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
) PARTITION BY RANGE (event_id);

-- Retention: a partition goes once its newest record is old enough; the
-- default partition is pruned in bounded batches.
CREATE INDEX IF NOT EXISTS {{.ProcessedIndex}} ON {{.Processed}} (processed_at);

CREATE TABLE IF NOT EXISTS {{.ProcessedDefault}} PARTITION OF {{.Processed}} DEFAULT;

-- The bounds as migration 001's, of this table's period: multiples of
-- its seconds since the epoch, as the smallest UUID v7 of their
-- millisecond.
DO $outboxkit$
DECLARE
    cur int8 := floor(extract(epoch FROM now()) / {{.ProcessedSeconds}})::int8;
BEGIN
    FOR i IN 0..{{.ProcessedAhead}} LOOP
        EXECUTE format('CREATE TABLE IF NOT EXISTS %I.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
            {{.SchemaLiteral}}, {{.TableLiteral}} || '_processed_p' || to_char(to_timestamp((cur + i) * {{.ProcessedSeconds}}) AT TIME ZONE 'UTC', '{{.ProcessedStamp}}'), {{.ProcessedLiteral}},
            rpad(lpad(to_hex((cur + i) * {{.ProcessedSeconds}} * 1000), 12, '0'), 32, '0')::uuid,
            rpad(lpad(to_hex((cur + i + 1) * {{.ProcessedSeconds}} * 1000), 12, '0'), 32, '0')::uuid);
    END LOOP;
END $outboxkit$;
