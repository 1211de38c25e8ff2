-- The transition stream's run rows are written by statement-level
-- triggers (issue 28's overhead). Migration 00023 wrote them with row-level
-- triggers on workflow_runs: every run a statement inserted, and every run
-- whose state it changed, called a PL/pgSQL function that ran a one-row
-- INSERT of its own. The scheduler and the finish change the state of
-- many runs in one statement, and under load those calls were the
-- stream's largest single cost (pg_stat_statements on W2: about 140 us a
-- call, two calls a run). Statement-level triggers with transition tables
-- write each statement's run rows in one INSERT ... SELECT, as the
-- task_events and task_runs triggers of 00023 already do.
--
-- The rows are the same: a run's creation (from no state, reason
-- 'created') for each inserted run, and each run whose state the
-- statement changed (old state to new; an UPDATE that leaves the state
-- alone writes nothing). A trigger with transition tables cannot name
-- columns (UPDATE OF state), so the update trigger fires for every UPDATE
-- statement of workflow_runs and compares the old and new rows itself;
-- with the stream off it returns after the same one look-up of the
-- setting as before. Transition rows are still written in the statement,
-- hence the transaction, that makes the transition (mode 121), and the ids
-- of one run's rows still follow its commits: the run's row lock orders
-- the statements that change it.
--
-- The triggers are replaced with workflow_runs locked first, waiting at
-- most half of deadlock_timeout (see 00023).
--
-- Expand: the triggers are the database's own; every binary reads the
-- rows they write as before.
-- flowforge:compat-floor 2

-- +goose Up
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
LOCK TABLE workflow_runs IN SHARE ROW EXCLUSIVE MODE;

-- +goose StatementBegin
CREATE FUNCTION flowforge_stream_runs_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM transition_stream_setting) THEN
        RETURN NULL;
    END IF;
    INSERT INTO transition_stream (run_id, workflow, kind, from_state, to_state, reason)
    SELECT n.id, n.workflow_name, 'run', NULL, n.state, 'created'
      FROM stream_new n;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION flowforge_stream_runs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM transition_stream_setting) THEN
        RETURN NULL;
    END IF;
    INSERT INTO transition_stream (run_id, workflow, kind, from_state, to_state)
    SELECT n.id, n.workflow_name, 'run', o.state, n.state
      FROM stream_new n
      JOIN stream_old o ON o.id = n.id
     WHERE o.state IS DISTINCT FROM n.state;
    RETURN NULL;
END $$;
-- +goose StatementEnd

DROP TRIGGER workflow_runs_stream_insert ON workflow_runs;
DROP TRIGGER workflow_runs_stream_state ON workflow_runs;
CREATE TRIGGER workflow_runs_stream_insert AFTER INSERT ON workflow_runs
    REFERENCING NEW TABLE AS stream_new FOR EACH STATEMENT EXECUTE FUNCTION flowforge_stream_runs_created();
CREATE TRIGGER workflow_runs_stream_state AFTER UPDATE ON workflow_runs
    REFERENCING OLD TABLE AS stream_old NEW TABLE AS stream_new FOR EACH STATEMENT EXECUTE FUNCTION flowforge_stream_runs_changed();
DROP FUNCTION flowforge_stream_run();

-- +goose Down
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
LOCK TABLE workflow_runs IN SHARE ROW EXCLUSIVE MODE;

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

DROP TRIGGER workflow_runs_stream_insert ON workflow_runs;
DROP TRIGGER workflow_runs_stream_state ON workflow_runs;
CREATE TRIGGER workflow_runs_stream_insert AFTER INSERT ON workflow_runs
    FOR EACH ROW EXECUTE FUNCTION flowforge_stream_run();
CREATE TRIGGER workflow_runs_stream_state AFTER UPDATE OF state ON workflow_runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION flowforge_stream_run();
DROP FUNCTION flowforge_stream_runs_changed();
DROP FUNCTION flowforge_stream_runs_created();
