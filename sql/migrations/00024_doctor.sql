-- ffctl doctor (issue 29).
--
-- workers.clock_at is the daemon's own clock at its latest heartbeat (the
-- statement's parameter), beside last_seen_at, the database's now() of the
-- same statement: their difference is the daemon's clock offset, which
-- `ffctl doctor` reports beyond a threshold. FlowForge compares no process
-- timestamp (one clock: the database's), so the column is read by doctor
-- alone; NULL for rows written by older binaries.
--
-- doctor_repairs audits each repair `ffctl doctor --repair --reason R`
-- made, in the repair's own transaction: which finding, its ids, who, the
-- operator's reason and what was done. The task history (task_events,
-- actor "doctor") records a repair that changed a task as well.
--
-- Expand: a nullable column and a new table old binaries never read.
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE workers ADD COLUMN clock_at timestamptz;

CREATE TABLE doctor_repairs (
    id          bigserial   PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    finding     text        NOT NULL,
    run_id      uuid,
    task_run_id uuid,
    outbox_id   bigint,
    actor       text        NOT NULL,
    reason      text        NOT NULL,
    detail      text        NOT NULL
);
CREATE INDEX doctor_repairs_at ON doctor_repairs (at);

-- +goose Down
DROP TABLE doctor_repairs;
ALTER TABLE workers DROP COLUMN clock_at;
