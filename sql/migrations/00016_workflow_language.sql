-- The workflow language (issue 26): when, trigger_rule, on_failure and
-- for_each. A task the scheduler decided not to run is SKIPPED, a terminal
-- state of its own: the CHECK on task_runs.state admits it. Each task run
-- copies from its definition what the statements that promote tasks read
-- (kind, trigger_rule, on_failure, when_expr: a task that is not plain —
-- kind task, all_success, no when, not on_failure — is decided by the
-- scheduler's pass, never by a finish's counter join nor made READY at
-- trigger), and the task runs a for_each task expands into name it
-- (element_of, element_index) and carry their element (item).
--
-- The schema change is an expand: old binaries never read the new columns
-- (their inserts take the defaults: a plain task) and never write the new
-- state. What an old binary cannot read is the data the language writes:
-- SKIPPED rows, element rows, and definitions whose tasks it would run
-- without their when, rule or for_each. So the floor of this migration is
-- raised to 16 by the first `workflow apply` (or rollback) that stores a
-- version using the language, in that transaction
-- (store.raiseLanguageFloor): from then on an older binary refuses to
-- start. Until then the release rolls as any expand.
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE task_runs DROP CONSTRAINT task_runs_state_check;
ALTER TABLE task_runs ADD CONSTRAINT task_runs_state_check
    CHECK (state IN ('PENDING', 'READY', 'RUNNING', 'SUCCEEDED', 'RETRYING', 'DEAD', 'CANCELLED', 'UPSTREAM_FAILED', 'SKIPPED'));
ALTER TABLE task_runs ADD COLUMN kind text NOT NULL DEFAULT 'task';
ALTER TABLE task_runs ADD COLUMN trigger_rule text NOT NULL DEFAULT 'all_success';
ALTER TABLE task_runs ADD COLUMN on_failure boolean NOT NULL DEFAULT false;
ALTER TABLE task_runs ADD COLUMN when_expr text;
ALTER TABLE task_runs ADD COLUMN element_of text;
ALTER TABLE task_runs ADD COLUMN element_index integer;
ALTER TABLE task_runs ADD COLUMN item jsonb;

-- +goose Down
-- Older code knows none of it: SKIPPED tasks wait PENDING again, and the
-- element rows of for_each tasks go.
DELETE FROM task_runs WHERE element_of IS NOT NULL;
UPDATE task_runs SET state = 'PENDING', finished_at = NULL WHERE state = 'SKIPPED';
ALTER TABLE task_runs DROP COLUMN item;
ALTER TABLE task_runs DROP COLUMN element_index;
ALTER TABLE task_runs DROP COLUMN element_of;
ALTER TABLE task_runs DROP COLUMN when_expr;
ALTER TABLE task_runs DROP COLUMN on_failure;
ALTER TABLE task_runs DROP COLUMN trigger_rule;
ALTER TABLE task_runs DROP COLUMN kind;
ALTER TABLE task_runs DROP CONSTRAINT task_runs_state_check;
ALTER TABLE task_runs ADD CONSTRAINT task_runs_state_check
    CHECK (state IN ('PENDING', 'READY', 'RUNNING', 'SUCCEEDED', 'RETRYING', 'DEAD', 'CANCELLED', 'UPSTREAM_FAILED'));
