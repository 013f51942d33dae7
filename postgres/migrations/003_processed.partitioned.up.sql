-- Consumer side: one row per (consumer, event) whose effect was applied,
-- written in the same transaction as the effect. Partitioned by event ID:
-- the primary key must hold the partition key, and the event ID is the
-- one column of the key that says when: a UUID v7 (core.NewID) starts
-- with its millisecond timestamp, so each partition covers the events
-- created in one {{.PartitionUnit}} (UTC). The key stays (consumer, event_id), so a
-- redelivery finds its record whenever it comes. Other IDs (random UUIDs,
-- a plain-SQL writer's gen_random_uuid()) fall where their first bytes
-- say, mostly in the default partition.
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

DO $outboxkit$
DECLARE
    lo timestamptz;
BEGIN
    FOR i IN 0..{{.PartitionsAhead}} LOOP
        lo := date_trunc('{{.PartitionUnit}}', now(), 'UTC') + i * interval '1 {{.PartitionUnit}}';
        EXECUTE format('CREATE TABLE IF NOT EXISTS %I.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
            {{.SchemaLiteral}}, {{.TableLiteral}} || '_processed_p' || to_char(lo AT TIME ZONE 'UTC', '{{.PartitionStamp}}'), {{.ProcessedLiteral}},
            rpad(lpad(to_hex((extract(epoch FROM lo) * 1000)::int8), 12, '0'), 32, '0')::uuid,
            rpad(lpad(to_hex((extract(epoch FROM lo + interval '1 {{.PartitionUnit}}') * 1000)::int8), 12, '0'), 32, '0')::uuid);
    END LOOP;
END $outboxkit$;
