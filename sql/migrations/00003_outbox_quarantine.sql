-- Outbox quarantine: a row the broker refuses permanently (its message is
-- larger than FlowForge's or the broker's size limit, or the broker answers
-- it with a 406) is set aside with its reason instead of failing every
-- batch it is in. A quarantined row is not pending: the publishers skip it
-- (the pending index excludes it). An operator retries it (the row becomes
-- pending again) or drops it (the row is kept, marked dropped, and its task
-- is buried DEAD with the reason); outbox_events audits all three.
--
-- An expand migration: binaries of schema 2 keep running on it (their
-- publishers do not know quarantine, so they still try a quarantined row).
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE outbox ADD COLUMN quarantined_at timestamptz;
ALTER TABLE outbox ADD COLUMN quarantine_reason text;
ALTER TABLE outbox ADD COLUMN dropped_at timestamptz;
DROP INDEX outbox_pending;
CREATE INDEX outbox_pending ON outbox (id) WHERE published_at IS NULL AND quarantined_at IS NULL;
CREATE INDEX outbox_quarantined ON outbox (id)
    WHERE published_at IS NULL AND quarantined_at IS NOT NULL AND dropped_at IS NULL;

CREATE TABLE outbox_events (
    id         bigserial   PRIMARY KEY,
    outbox_id  bigint      NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    action     text        NOT NULL CHECK (action IN ('quarantine', 'retry', 'drop')),
    actor      text        NOT NULL,
    reason     text        NOT NULL
);
CREATE INDEX outbox_events_outbox ON outbox_events (outbox_id, id);

-- +goose Down
DROP TABLE outbox_events;
DROP INDEX outbox_quarantined;
DROP INDEX outbox_pending;
UPDATE outbox SET quarantined_at = NULL WHERE dropped_at IS NULL;
DELETE FROM outbox WHERE dropped_at IS NOT NULL;
CREATE INDEX outbox_pending ON outbox (id) WHERE published_at IS NULL;
ALTER TABLE outbox DROP COLUMN dropped_at;
ALTER TABLE outbox DROP COLUMN quarantine_reason;
ALTER TABLE outbox DROP COLUMN quarantined_at;
