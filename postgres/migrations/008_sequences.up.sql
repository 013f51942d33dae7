-- Consumer side, per-aggregate order (postgres.Sequencer): the last
-- sequence each consumer applied per aggregate, advanced in the same
-- transaction as the effect. The row is also what dedupes a sequenced
-- event, so such events need no row in the processed table.
CREATE TABLE IF NOT EXISTS {{.Sequences}} (
    consumer       text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    last_sequence  bigint      NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);

-- Open gaps: an aggregate whose next event (expected) has not arrived
-- while a later one has, with the time the gap was first seen. Written
-- outside the effect's transaction (a gap runs no effect), deleted in the
-- transaction that closes the gap.
CREATE TABLE IF NOT EXISTS {{.SequenceGaps}} (
    consumer       text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    expected       bigint      NOT NULL,
    first_seen_at  timestamptz NOT NULL,
    alerted_at     timestamptz,
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);

-- Events the GapPark policy gave up waiting for their predecessor on and
-- answered as permanent failures (the transport dead-letters them), kept
-- for operators: what arrived, what it waited for, since when.
CREATE TABLE IF NOT EXISTS {{.SequenceParked}} (
    consumer       text        NOT NULL,
    event_id       uuid        NOT NULL,
    event_type     text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    sequence       bigint      NOT NULL,
    expected       bigint      NOT NULL,
    payload        jsonb,
    waiting_since  timestamptz NOT NULL,
    parked_at      timestamptz NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
