-- The tasks the scheduler holds without a worker (issue 26, part 2): a
-- durable sleep (kind 'sleep'), a wait for an event (kind 'wait') and a
-- child run (kind 'workflow'). Each is RUNNING while it holds, without a
-- lease (lease_expires_at NULL: no reaper touches it) and never in the
-- outbox.
--
--   due_at        a sleep's wake-up, a wait's timeout (database clock);
--                 found by the partial index task_runs_held_due, which
--                 holds only held tasks that are RUNNING
--   wait_event,   what a wait waits for: an event of that name whose key
--   wait_key      is wait_key (task_runs_waiting: an event's delivery is
--                 one probe)
--   child_run_id  a child run's id (task_runs_held_child: the sweep finds
--                 the parents whose child ended)
--
-- A child run names its parent task run and run (parent_task_run_id,
-- parent_run_id) and its depth (0 for a run nobody started); no foreign
-- key: a parent's run may be pruned or deleted before its child's.
--
-- events holds each event sent (id: the sender's, or one made up; the
-- primary key is what makes the same id delivered once), kept until
-- keep_until (its lookback: a waiter that starts before then matches it);
-- event_deliveries records which task runs each event completed.
--
-- Expand: new columns with defaults and new tables, which old binaries
-- never read. As with 00016, the first `workflow apply` storing a version
-- with a sleep, a wait or a child run raises this migration's floor to 17
-- in its transaction (store.raiseLanguageFloor): an older binary would
-- dispatch such a task to a worker.
-- flowforge:compat-floor 2

-- +goose Up
-- Both tables first, in the order a trigger takes them (workflow_runs,
-- then task_runs), waiting at most half of deadlock_timeout (200 ms at
-- most) for each: a migration that altered task_runs and then waited for
-- workflow_runs while a trigger held workflow_runs and waited for
-- task_runs was a deadlock, and PostgreSQL aborted the trigger. Now the
-- migration is the one to give up (a lock timeout: `ffctl migrate`
-- retries it) and it waits for nothing once it alters.
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
LOCK TABLE workflow_runs, task_runs IN ACCESS EXCLUSIVE MODE;
ALTER TABLE task_runs ADD COLUMN due_at timestamptz;
ALTER TABLE task_runs ADD COLUMN wait_event text;
ALTER TABLE task_runs ADD COLUMN wait_key text;
ALTER TABLE task_runs ADD COLUMN child_run_id uuid;
ALTER TABLE task_runs ADD COLUMN on_timeout text;
CREATE INDEX task_runs_held_due ON task_runs (due_at) WHERE state = 'RUNNING' AND due_at IS NOT NULL;
CREATE INDEX task_runs_waiting ON task_runs (wait_event, wait_key) WHERE state = 'RUNNING' AND wait_event IS NOT NULL;
CREATE INDEX task_runs_held_child ON task_runs (child_run_id) WHERE state = 'RUNNING' AND child_run_id IS NOT NULL;

ALTER TABLE workflow_runs ADD COLUMN parent_task_run_id uuid;
ALTER TABLE workflow_runs ADD COLUMN parent_run_id uuid;
ALTER TABLE workflow_runs ADD COLUMN depth integer NOT NULL DEFAULT 0;
CREATE INDEX workflow_runs_parent ON workflow_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE events (
    id          text        PRIMARY KEY,
    name        text        NOT NULL,
    key         text        NOT NULL DEFAULT '',
    payload     jsonb       NOT NULL DEFAULT 'null'::jsonb,
    sent_by     text        NOT NULL DEFAULT '',
    received_at timestamptz NOT NULL DEFAULT now(),
    keep_until  timestamptz NOT NULL
);
CREATE INDEX events_match ON events (name, key, received_at DESC);
CREATE INDEX events_received ON events (received_at DESC);
CREATE INDEX events_keep_until ON events (keep_until);

CREATE TABLE event_deliveries (
    event_id     text        NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    task_run_id  uuid        NOT NULL REFERENCES task_runs (id) ON DELETE CASCADE,
    run_id       uuid        NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, task_run_id)
);
CREATE INDEX event_deliveries_task ON event_deliveries (task_run_id);

-- +goose Down
DROP TABLE event_deliveries;
DROP TABLE events;
DROP INDEX workflow_runs_parent;
ALTER TABLE workflow_runs DROP COLUMN depth;
ALTER TABLE workflow_runs DROP COLUMN parent_run_id;
ALTER TABLE workflow_runs DROP COLUMN parent_task_run_id;
ALTER TABLE task_runs DROP COLUMN child_run_id;
ALTER TABLE task_runs DROP COLUMN on_timeout;
ALTER TABLE task_runs DROP COLUMN wait_key;
ALTER TABLE task_runs DROP COLUMN wait_event;
ALTER TABLE task_runs DROP COLUMN due_at;
