-- When a task run's flow-control admission dispatched it (issue 27): the
-- admission writes admitted_at (database clock) in the statement that
-- clears flow_wait and writes the outbox row, instead of a history row
-- per task run (task_events 'admitted: ...'), which cost an insert, three
-- index entries and a foreign-key check per admission; `task show` prints
-- it beside the task's READY and RUNNING times. A retry that waits again
-- overwrites it. NULL: never admitted (no flow control, or still waiting).
--
-- Expand: a nullable column old binaries never read (an older scheduler
-- goes on writing the history row). It alters task_runs alone, waiting at
-- most half of deadlock_timeout for its lock (`ffctl migrate` retries a
-- lock timeout).
-- flowforge:compat-floor 2

-- +goose Up
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
ALTER TABLE task_runs ADD COLUMN admitted_at timestamptz;

-- +goose Down
ALTER TABLE task_runs DROP COLUMN admitted_at;
