-- Retention (issue 15). The scheduler's pruner deletes settled runs older
-- than a configured age per final state (their task runs, outbox rows and
-- history go with them through the ON DELETE CASCADE foreign keys), and
-- published outbox rows older than --retain-outbox; `ffctl run delete` is an
-- operator's own clean-up of settled runs.
--
-- workflow_runs_settled serves the pruner's and `run delete --older-than`'s
-- look-up of settled runs by final state and age, so a pass reads only what
-- it deletes and never scans history (the published outbox rows already
-- have outbox_published_at).
--
-- run_deletions records every run an operator deleted: who, when, why, what
-- the run was and how many task runs went with it. It has NO foreign key:
-- the record outlives the rows it describes (task_events cascade with their
-- task). The automatic pruner writes no rows here (it would grow with the
-- history it bounds): its record is its metrics and one log line per pass.
--
-- An expand migration: binaries of schema 2 to 8 keep running on it (they
-- neither read nor write the new table, and an index changes no statement).
-- flowforge:compat-floor 2

-- +goose Up
CREATE INDEX workflow_runs_settled ON workflow_runs (state, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE run_deletions (
    id                bigserial   PRIMARY KEY,
    run_id            uuid        NOT NULL,
    workflow_name     text        NOT NULL,
    workflow_version  integer     NOT NULL,
    state             text        NOT NULL,
    run_created_at    timestamptz NOT NULL,
    run_finished_at   timestamptz NOT NULL,
    deleted_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor             text        NOT NULL,
    reason            text        NOT NULL,
    task_runs_deleted integer     NOT NULL
);
CREATE INDEX run_deletions_run ON run_deletions (run_id, id);
CREATE INDEX run_deletions_at ON run_deletions (deleted_at DESC);

-- +goose Down
DROP TABLE run_deletions;
DROP INDEX workflow_runs_settled;
