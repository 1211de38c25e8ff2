-- Reruns (issue 23). `ffctl run rerun RUN_ID --reason R` creates a new run
-- of the same workflow version with the same params as RUN_ID, through the
-- trigger's own statement; the new run records the run it repeats
-- (rerun_of), who asked (rerun_by) and why (rerun_reason). When is the new
-- run's created_at.
--
-- rerun_of has NO foreign key, like run_deletions.run_id and
-- task_runs.reused_from_run: the record outlives the run it names. Deleting
-- or pruning an old run therefore neither waits for nor writes its reruns
-- (an ON DELETE SET NULL would have to find them and update their rows,
-- which a scheduler pass may hold locked, inside every pruner batch), and a
-- rerun still says which run it repeated after that run is gone (`run show`
-- says so; run_deletions has the deleted run).
--
-- workflow_runs_reruns serves `run show OLD`'s list of the reruns of OLD,
-- oldest first. It is partial: a run that is not a rerun (nearly all of
-- them) adds no entry to it.
--
-- workflow_runs_rerun_audited keeps a rerun audited: the three columns are
-- set together or not at all. NOT VALID: every existing row has the three
-- NULL, so the check holds, and skipping its validation spares the ALTER a
-- scan of workflow_runs under its exclusive lock; new and updated rows are
-- checked.
--
-- An expand migration: binaries of schema 2 to 12 keep running on it (they
-- insert runs with the three columns NULL and never read them).
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE workflow_runs
    ADD COLUMN rerun_of     uuid,
    ADD COLUMN rerun_by     text,
    ADD COLUMN rerun_reason text,
    ADD CONSTRAINT workflow_runs_rerun_audited
        CHECK ((rerun_of IS NULL) = (rerun_by IS NULL) AND (rerun_of IS NULL) = (rerun_reason IS NULL)) NOT VALID;
CREATE INDEX workflow_runs_reruns ON workflow_runs (rerun_of, created_at) WHERE rerun_of IS NOT NULL;

-- +goose Down
DROP INDEX workflow_runs_reruns;
ALTER TABLE workflow_runs
    DROP CONSTRAINT workflow_runs_rerun_audited,
    DROP COLUMN rerun_reason,
    DROP COLUMN rerun_by,
    DROP COLUMN rerun_of;
