-- Per-aggregate sequence counters for Config.Ordering. Add bumps an
-- aggregate's row in the same statement that inserts its events; the row lock
-- orders concurrent writers, so sequences commit in sequence order. Rows are
-- never deleted: restarting a counter would hand out sequences consumers have
-- already seen.
CREATE TABLE IF NOT EXISTS {{.Aggregates}} (
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    last_sequence  bigint NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
)
-- Counter updates touch no indexed column: room on the page keeps them HOT.
WITH (fillfactor = 70);

-- Finds whether a pending event has a pending predecessor in its aggregate.
-- Only ordered events (sequence set) are in it, so unordered outboxes pay
-- nothing for it.
CREATE INDEX IF NOT EXISTS {{.AggregateIndex}} ON {{.Outbox}} (aggregate_type, aggregate_id, sequence)
    WHERE published_at IS NULL AND dead_at IS NULL AND sequence IS NOT NULL;
