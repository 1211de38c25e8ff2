-- A task run of kind 'task' that is RUNNING holds a lease (issue 29): the
-- claim sets lease_expires_at in the statement that makes it RUNNING, and
-- every statement that leaves RUNNING clears it. A row RUNNING with no
-- lease (a restore, a hand edit) was never reaped: the reaper's
-- `lease_expires_at < now()` is not true of NULL. This constraint refuses
-- such a write (SQLSTATE 23514, naming task_runs_running_task_has_a_lease);
-- held kinds (sleep, wait, workflow, for_each) are RUNNING without a lease
-- by design and are not bound by it.
--
-- NOT VALID: rows already in the table are not checked (the migration never
-- fails on an old database; the reaper takes such a row as an expired lease,
-- store.qExpiredLeases), every later write is. Expand: no binary writes a
-- RUNNING task without a lease. It alters task_runs alone, waiting at most
-- half of deadlock_timeout for its lock (`ffctl migrate` retries a lock
-- timeout).
-- flowforge:compat-floor 2

-- +goose Up
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
ALTER TABLE task_runs ADD CONSTRAINT task_runs_running_task_has_a_lease
    CHECK (state <> 'RUNNING' OR kind <> 'task' OR lease_expires_at IS NOT NULL) NOT VALID;

-- +goose Down
ALTER TABLE task_runs DROP CONSTRAINT task_runs_running_task_has_a_lease;
