-- Consumer side: one row per (consumer, event) whose effect was applied,
-- written in the same transaction as the effect.
CREATE TABLE IF NOT EXISTS {{.Processed}} (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Retention deletes the oldest records in bounded batches.
CREATE INDEX IF NOT EXISTS {{.ProcessedIndex}} ON {{.Processed}} (processed_at);
