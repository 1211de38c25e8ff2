-- Workers record what they can run: the presence heartbeat of a worker
-- process writes its handler set, the queue it consumes and whether it is
-- consuming from the broker right now, so that `workflow apply` can warn
-- about a handler no live worker registers and the dashboard's Workers
-- screen can show them. Other roles leave them NULL. Every daemon records
-- the address its health server listens on (health_addr: with default
-- settings a daemon whose role's port is taken listens on a free one).
--
-- A worker that hands back a task whose handler it does not register notes
-- it once per task and fencing token in task_events (a READY -> READY row
-- with worker_id set); the partial unique index makes that note at most one
-- row however many workers hand the task back, and serves the "waiting for
-- a worker with handler X" look-up of `run show` and the dashboard.
--
-- An expand migration: binaries of schema 2 and 3 keep running on it (they
-- do not write the new columns, and never write READY -> READY rows with a
-- worker_id).
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE workers ADD COLUMN handlers text[];
ALTER TABLE workers ADD COLUMN queue text;
ALTER TABLE workers ADD COLUMN broker_connected boolean;
ALTER TABLE workers ADD COLUMN health_addr text;
CREATE UNIQUE INDEX task_events_waiting_once ON task_events (task_run_id, fencing_token)
    WHERE from_state = 'READY' AND to_state = 'READY' AND worker_id IS NOT NULL;

-- +goose Down
DROP INDEX task_events_waiting_once;
ALTER TABLE workers DROP COLUMN health_addr;
ALTER TABLE workers DROP COLUMN broker_connected;
ALTER TABLE workers DROP COLUMN queue;
ALTER TABLE workers DROP COLUMN handlers;
