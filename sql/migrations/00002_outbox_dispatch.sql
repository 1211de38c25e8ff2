-- Redispatch of lost dispatches: a READY task that no worker claimed long
-- after its message was confirmed (the message was lost with a purged or
-- deleted queue, or a failed broker node) gets another outbox row with the
-- same fencing token and the next dispatch number; whichever copy arrives
-- first claims, the others lose. Dispatch 1 is the promotion's own.

-- Compat floor 2 (a contract): it replaces the outbox unique constraint that
-- the inserts of a binary of version 1 name.
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE outbox ADD COLUMN dispatch integer NOT NULL DEFAULT 1;
ALTER TABLE outbox DROP CONSTRAINT outbox_task_run_id_fencing_token_snapshot_key;
ALTER TABLE outbox ADD CONSTRAINT outbox_task_run_token_dispatch_key
    UNIQUE (task_run_id, fencing_token_snapshot, dispatch);

-- +goose Down
ALTER TABLE outbox DROP CONSTRAINT outbox_task_run_token_dispatch_key;
DELETE FROM outbox WHERE dispatch > 1;
ALTER TABLE outbox ADD CONSTRAINT outbox_task_run_id_fencing_token_snapshot_key
    UNIQUE (task_run_id, fencing_token_snapshot);
ALTER TABLE outbox DROP COLUMN dispatch;
