-- Idempotency reuse made visible and bounded (issue 11). A task run that
-- reused another task run's recorded result for its idempotency key says so:
-- reused_from and reused_from_run name the task run (and its run) whose
-- result it took, set by the finish that records the reuse. A task may
-- declare idempotency_ttl: its task runs carry it (idempotency_ttl_ms, NULL
-- meaning for ever) and reuse a recorded result only while it is younger
-- than that (completed_at + ttl > now(), database clock); an older one is
-- taken over and the handler runs again. `ffctl task forget-key` releases a
-- key (never while its owner is RUNNING); idempotency_key_events keeps who,
-- when, why, and the result that was forgotten.
--
-- An expand migration: binaries of schema 2 keep running on it (they never
-- record a reuse, their task runs carry no TTL, so their keys never expire).
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE task_runs ADD COLUMN reused_from uuid;
ALTER TABLE task_runs ADD COLUMN reused_from_run uuid;
ALTER TABLE task_runs ADD COLUMN idempotency_ttl_ms bigint CHECK (idempotency_ttl_ms > 0);

CREATE TABLE idempotency_key_events (
    id                  bigserial   PRIMARY KEY,
    key                 text        NOT NULL,
    at                  timestamptz NOT NULL DEFAULT clock_timestamp(),
    action              text        NOT NULL CHECK (action IN ('forget')),
    actor               text        NOT NULL,
    reason              text        NOT NULL,
    -- task_run_id is the task run the operator named; owner_* is the key's
    -- owner and what it had recorded when the key was forgotten.
    task_run_id         uuid        NOT NULL,
    owner_task_run_id   uuid        NOT NULL,
    owner_fencing_token bigint      NOT NULL,
    completed_at        timestamptz,
    result              jsonb
);
CREATE INDEX idempotency_key_events_key ON idempotency_key_events (key, id);

-- +goose Down
DROP TABLE idempotency_key_events;
ALTER TABLE task_runs DROP COLUMN idempotency_ttl_ms;
ALTER TABLE task_runs DROP COLUMN reused_from_run;
ALTER TABLE task_runs DROP COLUMN reused_from;
