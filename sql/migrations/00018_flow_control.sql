-- Flow control (issue 27, part 1): concurrency keys and rate limits that
-- hold across every worker, enforced by the scheduler's admission
-- (store.Admit) in PostgreSQL.
--
-- A task run with a concurrency key or a rate limit carries its evaluated
-- keys and the definition's limits (concurrency_key, concurrency_limit;
-- rate_key, rate_limit, rate_per_ms). When it becomes READY it waits
-- (flow_wait = 'concurrency', then 'rate') with no outbox row: no message
-- exists for it, nothing can claim it, and it uses no attempt. The
-- admission clears flow_wait and writes the outbox row.
--
-- A slot is not a counter: a task run holds one of its key's slots while
-- it is READY or RUNNING and not waiting for one, and runs a handler (kind
-- 'task': a for_each task carries its key for its elements, which hold the
-- slots, and holds none itself; the partial index
-- task_runs_slots holds exactly the holders). Whatever statement moves it
-- out of READY or RUNNING (a finish, a reap to RETRYING or DEAD, a cancel,
-- fail_fast) gives the slot back in that statement: never later, never
-- twice.
--
-- flow_limits holds one row per key and kind: the admission locks it (its
-- lock serialises the admissions of a key, so two schedulers never admit
-- past the limit), the operator's limit when one was set (operator_limit;
-- NULL: the definitions'), and for a rate key the start times of its last
-- `limit` admissions (database clock), oldest first.
-- flow_limit_events audits every `ffctl limits set`.
--
-- Expand: new columns and tables that old binaries never read. The first
-- `workflow apply` storing a version with flow control raises this
-- migration's floor to 18 in its transaction (store.raiseLanguageFloor):
-- an older binary would redispatch a waiting task.
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
ALTER TABLE task_runs ADD COLUMN concurrency_key text;
ALTER TABLE task_runs ADD COLUMN concurrency_limit integer;
ALTER TABLE task_runs ADD COLUMN rate_key text;
ALTER TABLE task_runs ADD COLUMN rate_limit integer;
ALTER TABLE task_runs ADD COLUMN rate_per_ms bigint;
ALTER TABLE task_runs ADD COLUMN flow_wait text CHECK (flow_wait IN ('concurrency', 'rate'));
-- priority orders a key's waiters (1 lowest .. 4 highest; a waiter gains
-- a level per store.PriorityAging it waits): the task's, or its run's
-- (workflow_runs.priority, `run trigger --priority`).
ALTER TABLE task_runs ADD COLUMN priority smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4);
ALTER TABLE workflow_runs ADD COLUMN priority smallint CHECK (priority BETWEEN 1 AND 4);
CREATE INDEX task_runs_slots ON task_runs (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND kind = 'task' AND state IN ('READY', 'RUNNING') AND flow_wait IS DISTINCT FROM 'concurrency';
CREATE INDEX task_runs_waiting_concurrency ON task_runs (concurrency_key, priority DESC, ready_at)
    WHERE state = 'READY' AND flow_wait = 'concurrency';
CREATE INDEX task_runs_waiting_rate ON task_runs (rate_key, priority DESC, ready_at)
    WHERE state = 'READY' AND flow_wait = 'rate';

-- A run of a workflow with a run-level concurrency key carries its key,
-- the definition's limit and strategy; it is triggered waiting (run_wait:
-- no task of it starts) until the admission gives it one of its key's
-- slots. A run holds a slot while it is open (finished_at IS NULL) and not
-- waiting (workflow_runs_slots): its settle gives the slot back.
ALTER TABLE workflow_runs ADD COLUMN concurrency_key text;
ALTER TABLE workflow_runs ADD COLUMN concurrency_limit integer;
ALTER TABLE workflow_runs ADD COLUMN concurrency_strategy text
    CHECK (concurrency_strategy IN ('queue', 'cancel-newest', 'cancel-in-progress'));
ALTER TABLE workflow_runs ADD COLUMN run_wait boolean NOT NULL DEFAULT false;
CREATE INDEX workflow_runs_slots ON workflow_runs (concurrency_key, created_at)
    WHERE concurrency_key IS NOT NULL AND finished_at IS NULL AND NOT run_wait;
CREATE INDEX workflow_runs_waiting ON workflow_runs (concurrency_key, created_at)
    WHERE run_wait AND finished_at IS NULL;

CREATE TABLE flow_limits (
    kind           text        NOT NULL CHECK (kind IN ('concurrency', 'rate', 'run')),
    key            text        NOT NULL,
    lim            integer     NOT NULL CHECK (lim > 0),
    per_ms         bigint      CHECK (per_ms > 0),
    operator_limit integer     CHECK (operator_limit > 0),
    starts         timestamptz[] NOT NULL DEFAULT '{}',
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, key)
);

CREATE TABLE flow_limit_events (
    id        bigserial   PRIMARY KEY,
    kind      text        NOT NULL,
    key       text        NOT NULL,
    old_limit integer,
    new_limit integer,
    actor     text        NOT NULL,
    reason    text        NOT NULL,
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX flow_limit_events_key ON flow_limit_events (kind, key, id);

-- +goose Down
DROP TABLE flow_limit_events;
DROP TABLE flow_limits;
DROP INDEX workflow_runs_waiting;
DROP INDEX workflow_runs_slots;
ALTER TABLE workflow_runs DROP COLUMN run_wait;
ALTER TABLE workflow_runs DROP COLUMN concurrency_strategy;
ALTER TABLE workflow_runs DROP COLUMN concurrency_limit;
ALTER TABLE workflow_runs DROP COLUMN concurrency_key;
DROP INDEX task_runs_waiting_rate;
DROP INDEX task_runs_waiting_concurrency;
DROP INDEX task_runs_slots;
ALTER TABLE workflow_runs DROP COLUMN priority;
ALTER TABLE task_runs DROP COLUMN priority;
ALTER TABLE task_runs DROP COLUMN flow_wait;
ALTER TABLE task_runs DROP COLUMN rate_per_ms;
ALTER TABLE task_runs DROP COLUMN rate_limit;
ALTER TABLE task_runs DROP COLUMN rate_key;
ALTER TABLE task_runs DROP COLUMN concurrency_limit;
ALTER TABLE task_runs DROP COLUMN concurrency_key;
