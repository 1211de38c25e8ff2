-- Workflow pause (issue 15). workflow_pauses holds one row per paused
-- workflow (by name: every version): while it exists no task of the
-- workflow is claimed (the claim's fence), its outbox rows stay unpublished
-- (the publisher skips them), the redispatch leaves its READY tasks alone,
-- and a trigger of it either creates its run, whose tasks then wait (mode
-- queue), or creates nothing and counts the drop here (mode drop). Resume
-- deletes the row. workflow_pause_events is the audit of every pause,
-- re-pause and resume: who, when, why, the mode, and at resume the drops
-- counted during the pause. Neither table has a foreign key: a pause names
-- a workflow, not rows that a clean-up may delete, and its audit outlives
-- whatever it paused.
--
-- An expand migration: binaries of schema 2..6 keep running on it, but they
-- do not know the pause: an old worker claims, an old publisher publishes
-- and an old trigger creates runs of a paused workflow. Upgrade every
-- daemon before relying on a pause.
-- flowforge:compat-floor 2

-- +goose Up
CREATE TABLE workflow_pauses (
    workflow_name text        PRIMARY KEY,
    mode          text        NOT NULL CHECK (mode IN ('queue', 'drop')),
    actor         text        NOT NULL,
    reason        text        NOT NULL,
    -- paused_at is when the pause began; updated_at when it was last
    -- re-paused with another mode or reason.
    paused_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- dropped counts the runs that triggers did not create (mode drop).
    dropped       bigint      NOT NULL DEFAULT 0
);

CREATE TABLE workflow_pause_events (
    id            bigserial   PRIMARY KEY,
    workflow_name text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    action        text        NOT NULL CHECK (action IN ('pause', 'resume')),
    -- mode is the pause's mode (at resume: the mode it had).
    mode          text        NOT NULL CHECK (mode IN ('queue', 'drop')),
    actor         text        NOT NULL,
    reason        text        NOT NULL,
    -- dropped is set at resume: the runs dropped during the pause.
    dropped       bigint
);
CREATE INDEX workflow_pause_events_workflow ON workflow_pause_events (workflow_name, id);

-- +goose Down
DROP TABLE workflow_pause_events;
DROP TABLE workflow_pauses;
