-- Per-task logs (issue 28): the lines a handler logs through core.Logger
-- and a shell command's stdout and stderr, one row per line, per attempt.
-- The worker writes them in batches of its own (never in the finish's
-- statement), so a retried batch is idempotent by the primary key
-- (task_run_id, attempt, seq): seq counts an attempt's lines from 1 in
-- the order it logged them. An attempt whose lease was lost writes its
-- own attempt's rows only, never another owner's.
--
-- No foreign key: its check would take a KEY SHARE lock on the task run
-- per line, beside the claim and finish that update it. Pruning and
-- `ffctl run delete` delete a run's lines in the statement that deletes
-- the run (through task_runs.run_id); the writer inserts only lines of a
-- task run that exists. logged_at is the line's time (the worker's
-- clock); level is the slog level for stream 'log', NULL otherwise.
--
-- Expand: a new table old binaries never read.
-- flowforge:compat-floor 2

-- +goose Up
CREATE TABLE task_logs (
    task_run_id uuid        NOT NULL,
    attempt     int         NOT NULL,
    seq         int         NOT NULL,
    logged_at   timestamptz NOT NULL,
    stream      text        NOT NULL CHECK (stream IN ('log', 'stdout', 'stderr')),
    level       text,
    line        text        NOT NULL,
    PRIMARY KEY (task_run_id, attempt, seq)
);

-- +goose Down
DROP TABLE task_logs;
