-- Schedules (issue 15): a schedule starts runs of a workflow (its newest
-- version at each tick) at the fire times of a cron expression in a time
-- zone. Each tick the scheduler fires is a row of schedule_ticks whose
-- unique key (schedule_id, scheduled_at) is taken in the SAME transaction
-- that creates the tick's run (idempotency key
-- "schedule:<name>:<RFC3339 UTC time>"): however many schedulers race for a
-- tick, one inserts the row and its run, the others insert nothing. A
-- manual tick (`schedule trigger-now`) is outside the cron and outside that
-- key. The tick keeps its outcome: fired (run_id), skipped (the previous run
-- was open and the overlap policy is skip), dropped (the workflow is paused
-- in drop mode) or failed (the run could not be created), with why.
-- run_id has no foreign key: the retention pruner deletes old runs, and the
-- tick stays. fired_through is the schedule's last-fired point: every tick
-- at or before it is decided (fired, or dropped by the catch-up policy).
-- schedule_events audits operator actions on schedules; it names the
-- schedule, with no foreign key, so it outlives a deleted one.
--
-- An expand migration: binaries of schema 2 to 7 never read the new tables.
-- flowforge:compat-floor 2

-- +goose Up
CREATE TABLE schedules (
    id                bigserial   PRIMARY KEY,
    name              text        NOT NULL UNIQUE,
    workflow_name     text        NOT NULL,
    cron              text        NOT NULL,
    timezone          text        NOT NULL DEFAULT 'UTC',
    params            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    overlap           text        NOT NULL DEFAULT 'skip'
                      CHECK (overlap IN ('skip', 'allow', 'cancel-previous')),
    catchup           text        NOT NULL DEFAULT 'none' CHECK (catchup IN ('none', 'one', 'all')),
    catchup_window_ms bigint      NOT NULL DEFAULT 0 CHECK (catchup_window_ms >= 0),
    jitter_ms         bigint      NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
    paused            boolean     NOT NULL DEFAULT false,
    owner             text        NOT NULL DEFAULT 'cli' CHECK (owner IN ('cli', 'file')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    fired_through     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE schedule_ticks (
    id           bigserial   PRIMARY KEY,
    schedule_id  bigint      NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    scheduled_at timestamptz NOT NULL,
    fired_at     timestamptz NOT NULL DEFAULT now(),
    manual       boolean     NOT NULL DEFAULT false,
    outcome      text        NOT NULL CHECK (outcome IN ('fired', 'skipped', 'dropped', 'failed')),
    run_id       uuid,
    reason       text,
    actor        text        NOT NULL
);
CREATE UNIQUE INDEX schedule_ticks_once ON schedule_ticks (schedule_id, scheduled_at) WHERE NOT manual;
CREATE INDEX schedule_ticks_recent ON schedule_ticks (schedule_id, id);

CREATE TABLE schedule_events (
    id            bigserial   PRIMARY KEY,
    schedule_name text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    action        text        NOT NULL CHECK (action IN ('create', 'update', 'pause', 'resume', 'delete', 'trigger-now')),
    actor         text        NOT NULL,
    reason        text        NOT NULL
);
CREATE INDEX schedule_events_name ON schedule_events (schedule_name, id);

-- +goose Down
DROP TABLE schedule_events;
DROP TABLE schedule_ticks;
DROP TABLE schedules;
