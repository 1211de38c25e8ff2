-- The transition stream (issue 28): every run and task transition, written
-- by PostgreSQL triggers into transition_stream in the transaction that
-- makes it, and published by the publisher to a topic exchange
-- (store.stream.go, daemon/publisher/stream.go, docs/operating.md).
--
-- transition_stream_setting holds one row while the stream is on: the
-- exchange it goes to. The database is the one home of the setting because
-- the scheduler, the workers, ffctl and the API all make transitions. With
-- no row every trigger function returns after one look-up of that table.
--
-- Triggers, so that no code path can forget a transition:
--   * task_events AFTER INSERT (per statement, over the inserted rows):
--     every task state change writes a task_events row in its statement;
--     rows whose from and to states are equal (a worker's "waiting" note)
--     are not transitions and are skipped.
--   * task_runs AFTER INSERT (per statement): a task's creation, from no
--     state to PENDING or READY (a creation writes no task_events row).
--   * workflow_runs AFTER INSERT (per row) and AFTER UPDATE OF state (per
--     row, only when the state changed): run transitions.
--
-- seq, the run's sequence number (1, 2, 3 ... per run, no gap), is NULL
-- when the row is written and assigned by the publisher, one assigner at a
-- time (transaction-level advisory lock), in id order; the last one given
-- to a run is kept in transition_stream_seqs so that pruning published rows
-- never restarts a run's numbering. Neither table has a foreign key: its
-- check would take a KEY SHARE lock on the run inside the writer's (claim,
-- finish) transaction, after the task row, while the scheduler and the
-- finish lock the run FOR UPDATE before its tasks: a lock-order inversion.
-- The prune and delete statements delete a run's rows with the run
-- (store.deleteCandRows).
--
-- The triggers are created with the three tables locked first, in a
-- trigger's order, waiting at most half of deadlock_timeout (see
-- README.md, "Locks under load").
--
-- Expand: new tables; old binaries never read them, and the triggers write
-- nothing until a new publisher turns the stream on.
-- flowforge:compat-floor 2

-- +goose Up
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
LOCK TABLE workflow_runs, task_runs, task_events IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE transition_stream_setting (
    one_row    bool        PRIMARY KEY DEFAULT true CHECK (one_row),
    exchange   text        NOT NULL CHECK (exchange <> ''),
    enabled_at timestamptz NOT NULL DEFAULT now(),
    enabled_by text        NOT NULL
);

CREATE TABLE transition_stream (
    id               bigserial   PRIMARY KEY,
    event_id         uuid        NOT NULL DEFAULT gen_random_uuid(),
    run_id           uuid        NOT NULL,
    workflow         text        NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('run', 'task')),
    task_run_id      uuid,
    task             text,
    from_state       text,
    to_state         text        NOT NULL,
    attempt          int         NOT NULL DEFAULT 0,
    actor            text,
    reason           text,
    at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    seq              bigint,
    published_at     timestamptz,
    publish_attempts int         NOT NULL DEFAULT 0,
    last_error       text
);
CREATE INDEX transition_stream_pending ON transition_stream (id) WHERE published_at IS NULL;
CREATE INDEX transition_stream_published_at ON transition_stream (published_at) WHERE published_at IS NOT NULL;
CREATE INDEX transition_stream_run ON transition_stream (run_id);

CREATE TABLE transition_stream_seqs (
    run_id   uuid   PRIMARY KEY,
    last_seq bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION flowforge_stream_task_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM transition_stream_setting) THEN
        RETURN NULL;
    END IF;
    INSERT INTO transition_stream (run_id, workflow, kind, task_run_id, task, from_state, to_state, attempt, actor, reason, at)
    SELECT e.run_id, r.workflow_name, 'task', e.task_run_id, t.task_name, e.from_state, e.to_state, e.attempt, e.actor, e.reason, e.at
      FROM stream_new e
      JOIN task_runs t ON t.id = e.task_run_id
      JOIN workflow_runs r ON r.id = e.run_id
     WHERE e.from_state IS DISTINCT FROM e.to_state
     ORDER BY e.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION flowforge_stream_task_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM transition_stream_setting) THEN
        RETURN NULL;
    END IF;
    INSERT INTO transition_stream (run_id, workflow, kind, task_run_id, task, from_state, to_state, attempt, reason)
    SELECT t.run_id, r.workflow_name, 'task', t.id, t.task_name, NULL, t.state, t.attempt, 'created'
      FROM stream_new t
      JOIN workflow_runs r ON r.id = t.run_id
     ORDER BY t.run_id, t.task_name;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION flowforge_stream_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM transition_stream_setting) THEN
        RETURN NULL;
    END IF;
    INSERT INTO transition_stream (run_id, workflow, kind, from_state, to_state, reason)
    VALUES (NEW.id, NEW.workflow_name, 'run', CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state,
            CASE WHEN TG_OP = 'INSERT' THEN 'created' END);
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER workflow_runs_stream_insert AFTER INSERT ON workflow_runs
    FOR EACH ROW EXECUTE FUNCTION flowforge_stream_run();
CREATE TRIGGER workflow_runs_stream_state AFTER UPDATE OF state ON workflow_runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION flowforge_stream_run();
CREATE TRIGGER task_runs_stream_insert AFTER INSERT ON task_runs
    REFERENCING NEW TABLE AS stream_new FOR EACH STATEMENT EXECUTE FUNCTION flowforge_stream_task_created();
CREATE TRIGGER task_events_stream AFTER INSERT ON task_events
    REFERENCING NEW TABLE AS stream_new FOR EACH STATEMENT EXECUTE FUNCTION flowforge_stream_task_events();

-- +goose Down
DROP TRIGGER task_events_stream ON task_events;
DROP TRIGGER task_runs_stream_insert ON task_runs;
DROP TRIGGER workflow_runs_stream_state ON workflow_runs;
DROP TRIGGER workflow_runs_stream_insert ON workflow_runs;
DROP FUNCTION flowforge_stream_run();
DROP FUNCTION flowforge_stream_task_created();
DROP FUNCTION flowforge_stream_task_events();
DROP TABLE transition_stream_seqs;
DROP TABLE transition_stream;
DROP TABLE transition_stream_setting;
