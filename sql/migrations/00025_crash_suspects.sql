-- Crash attribution (issue 29): a task that kills its worker must not take
-- the worker's other tasks down with it (store.Reap, FAILURE_MODEL modes
-- 128 and 129).
--
-- task_runs.suspect: the task was in flight with other tasks of a worker
-- whose leases lapsed together (a crash), so it may be the one that killed
-- it; its worker runs its handler alone. A finish of an attempt that ran
-- alone clears it.
-- task_runs.crash_refunds: how many attempts the reaper gave back to the
-- task for such crashes (max_attempts was raised by one each time); past
-- store.CrashGiveBacksMax the attempt counts anyway.
-- task_runs.alone_token: the fencing token of the attempt whose handler its
-- worker started alone (a suspect's run); NULL when none did. The reaper
-- tells "the suspect ran alone" (it is the culprit) from "it was claimed
-- and waited for the others to end" by comparing it with the token.
-- task_events.crash_companions: set on the history row of a reaped lease
-- only: how many other tasks of the same worker were in flight with it.
-- The reaper counts a worker's earlier reaps through
-- task_events_crash_reaps, so the last lease of a crash to lapse still
-- knows its companions.
--
-- Expand: new columns with defaults (no table rewrite) and an index; older
-- binaries never read them (their reaper counts every crash, as before).
-- It takes task_runs and task_events first, in the order every writer of
-- both takes them (a claim, a finish, a reap: the task row, then its
-- history row), waiting at most half of deadlock_timeout (`ffctl migrate`
-- retries a lock timeout).
-- flowforge:compat-floor 2

-- +goose Up
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
LOCK TABLE task_runs, task_events IN ACCESS EXCLUSIVE MODE;
ALTER TABLE task_runs
    ADD COLUMN suspect boolean NOT NULL DEFAULT false,
    ADD COLUMN crash_refunds integer NOT NULL DEFAULT 0,
    ADD COLUMN alone_token bigint;
ALTER TABLE task_events ADD COLUMN crash_companions integer;
CREATE INDEX task_events_crash_reaps ON task_events (worker_id, at) WHERE crash_companions IS NOT NULL;

-- +goose Down
DROP INDEX task_events_crash_reaps;
ALTER TABLE task_events DROP COLUMN crash_companions;
ALTER TABLE task_runs DROP COLUMN suspect, DROP COLUMN crash_refunds, DROP COLUMN alone_token;
