-- An index for the scheduler's sweep (issue 21, core/store/sweep.go): every
-- part of its candidate query runs every --sweep-interval and must follow
-- the live work, never the history.
--
-- task_runs_dead_run holds the DEAD tasks by run: the fail_fast part probes
-- it for each open fail_fast run (task_runs_dead is ordered by finished_at,
-- for the dead-letter listing, and cannot answer "has this run a DEAD
-- task").
--
-- An expand migration: binaries of schema 2 to 9 keep running on it (an
-- index changes no statement), and this binary runs on schema 9 too (its
-- sweep is then slower, not wrong), so SchemaVersionMin stays 9.
-- flowforge:compat-floor 2

-- +goose Up
CREATE INDEX task_runs_dead_run ON task_runs (run_id) WHERE state = 'DEAD';

-- +goose Down
DROP INDEX task_runs_dead_run;
