-- FlowForge schema. PostgreSQL is the source of truth: every fact about runs,
-- tasks, leases, fencing tokens and dispatches lives here. Every timestamp that
-- is compared (leases, retry due times, ages) is produced by PostgreSQL.

-- Compat floor: the first schema.
-- flowforge:compat-floor 1

-- +goose Up
CREATE TABLE workflows (
    id          bigserial PRIMARY KEY,
    name        text        NOT NULL,
    version     integer     NOT NULL CHECK (version > 0),
    definition  jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (name, version)
);

CREATE TABLE workflow_runs (
    id                  uuid        PRIMARY KEY,
    workflow_id         bigint      NOT NULL REFERENCES workflows (id),
    workflow_name       text        NOT NULL,
    workflow_version    integer     NOT NULL,
    state               text        NOT NULL DEFAULT 'PENDING'
                        CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    params              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    idempotency_key     text        UNIQUE,
    fail_fast           boolean     NOT NULL DEFAULT false,
    cancel_requested_at timestamptz,
    cancel_reason       text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    -- finished_at is set when the run settles: no task is READY, RUNNING or
    -- RETRYING. NULL means "open": the scheduler still derives its state.
    finished_at         timestamptz
);
CREATE INDEX workflow_runs_open ON workflow_runs (created_at) WHERE finished_at IS NULL;
CREATE INDEX workflow_runs_created ON workflow_runs (created_at DESC);
CREATE INDEX workflow_runs_workflow_created ON workflow_runs (workflow_name, created_at DESC);
CREATE INDEX workflow_runs_state_created ON workflow_runs (state, created_at DESC);

CREATE TABLE task_runs (
    id                 uuid        PRIMARY KEY,
    run_id             uuid        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    task_name          text        NOT NULL,
    handler            text        NOT NULL,
    params             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    depends_on         text[]      NOT NULL DEFAULT '{}',
    state              text        NOT NULL
                       CHECK (state IN ('PENDING', 'READY', 'RUNNING', 'SUCCEEDED', 'RETRYING', 'DEAD', 'CANCELLED')),
    attempt            integer     NOT NULL DEFAULT 0,
    max_attempts       integer     NOT NULL CHECK (max_attempts >= 1),
    initial_backoff_ms bigint      NOT NULL DEFAULT 1000,
    max_backoff_ms     bigint      NOT NULL DEFAULT 60000,
    timeout_ms         bigint      NOT NULL DEFAULT 0,
    fencing_token      bigint      NOT NULL DEFAULT 0,
    lease_expires_at   timestamptz,
    heartbeat_at       timestamptz,
    worker_id          text,
    ready_at           timestamptz,
    next_attempt_at    timestamptz,
    started_at         timestamptz,
    finished_at        timestamptz,
    result             jsonb,
    error              text,
    idempotency_key    text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, task_name)
);
-- Partial indexes on the live states: the daemons' queries never scan history.
CREATE INDEX task_runs_pending ON task_runs (run_id) WHERE state = 'PENDING';
CREATE INDEX task_runs_ready ON task_runs (ready_at) WHERE state = 'READY';
CREATE INDEX task_runs_running_lease ON task_runs (lease_expires_at) WHERE state = 'RUNNING';
CREATE INDEX task_runs_retry_due ON task_runs (next_attempt_at) WHERE state = 'RETRYING';
CREATE INDEX task_runs_dead ON task_runs (finished_at DESC) WHERE state = 'DEAD';

-- The transactional outbox: a row is written in the same transaction that
-- makes a task READY, and stamped published_at only after the broker
-- confirmed the message. One row per (task run, fencing token generation).
CREATE TABLE outbox (
    id                     bigserial   PRIMARY KEY,
    task_run_id            uuid        NOT NULL REFERENCES task_runs (id) ON DELETE CASCADE,
    fencing_token_snapshot bigint      NOT NULL,
    payload                jsonb       NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    published_at           timestamptz,
    publish_attempts       integer     NOT NULL DEFAULT 0,
    last_error             text,
    UNIQUE (task_run_id, fencing_token_snapshot)
);
CREATE INDEX outbox_pending ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Append-only history of every task transition: the attempt history of
-- `ffctl task show` and the audit trail of requeues and cancellations.
CREATE TABLE task_events (
    id            bigserial   PRIMARY KEY,
    task_run_id   uuid        NOT NULL REFERENCES task_runs (id) ON DELETE CASCADE,
    run_id        uuid        NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    from_state    text,
    to_state      text        NOT NULL,
    attempt       integer     NOT NULL DEFAULT 0,
    fencing_token bigint      NOT NULL DEFAULT 0,
    worker_id     text,
    actor         text        NOT NULL,
    reason        text
);
CREATE INDEX task_events_task ON task_events (task_run_id, id);
CREATE INDEX task_events_run ON task_events (run_id, id);

-- Task-level idempotency: one owner per key at a time; its result, once
-- recorded, is reused by every later task run with the same key.
CREATE TABLE idempotency_keys (
    key           text        PRIMARY KEY,
    task_run_id   uuid        NOT NULL,
    fencing_token bigint      NOT NULL,
    result        jsonb,
    completed_at  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Daemon processes seen recently (for the dashboard).
CREATE TABLE workers (
    id           text        PRIMARY KEY,
    role         text        NOT NULL,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workers_last_seen ON workers (last_seen_at DESC);

-- +goose Down
DROP TABLE workers;
DROP TABLE idempotency_keys;
DROP TABLE task_events;
DROP TABLE outbox;
DROP TABLE task_runs;
DROP TABLE workflow_runs;
DROP TABLE workflows;
