-- UPSTREAM_FAILED: a PENDING task with a DEAD task among its transitive
-- dependencies is buried UPSTREAM_FAILED in the statement that writes the
-- DEAD state (instead of waiting PENDING for ever), and returns to PENDING
-- when a requeue leaves none of its ancestors DEAD. The CHECK on
-- task_runs.state is widened to admit it.
--
-- An expand migration: binaries of schema 2 and 3 never write the new state,
-- and every insert or update they make still satisfies the wider CHECK.
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE task_runs DROP CONSTRAINT task_runs_state_check;
ALTER TABLE task_runs ADD CONSTRAINT task_runs_state_check
    CHECK (state IN ('PENDING', 'READY', 'RUNNING', 'SUCCEEDED', 'RETRYING', 'DEAD', 'CANCELLED', 'UPSTREAM_FAILED'));

-- +goose Down
-- Older code does not know the state: its tasks wait PENDING again (the
-- behaviour before this migration), so a requeue of their DEAD ancestor
-- still runs them.
UPDATE task_runs SET state = 'PENDING', finished_at = NULL, error = NULL WHERE state = 'UPSTREAM_FAILED';
ALTER TABLE task_runs DROP CONSTRAINT task_runs_state_check;
ALTER TABLE task_runs ADD CONSTRAINT task_runs_state_check
    CHECK (state IN ('PENDING', 'READY', 'RUNNING', 'SUCCEEDED', 'RETRYING', 'DEAD', 'CANCELLED'));
