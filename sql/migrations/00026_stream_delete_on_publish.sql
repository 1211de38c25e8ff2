-- The transition stream keeps only what is still to publish (issue 28's
-- overhead): the publisher deletes a row in the transaction that records
-- the broker's confirm (store.StreamBatch.DeletePublished) instead of
-- stamping it published for the pruner to delete a day later. A row then
-- costs one index entry (its primary key) instead of four, and one write
-- after its insert (the seq, a HOT update) instead of three. The record of
-- what happened stays in task_events and workflow_runs; the published
-- stream is the broker's.
--
-- transition_stream_pending indexed the unpublished rows: every row is one
-- now, so the primary key serves the same scans (id order). The pruner
-- and the deletion of runs delete a run's rows by run_id over the backlog
-- only, which is small while the stream keeps up, so transition_stream_run
-- goes too. transition_stream_published_at stays: rows stamped published
-- by an older publisher (rolling upgrade) are still pruned through it, and
-- it costs nothing while no row is stamped.
--
-- Expand: older binaries still run (their queries return the same rows,
-- through the primary key).
-- flowforge:compat-floor 2

-- +goose Up
DROP INDEX transition_stream_pending;
DROP INDEX transition_stream_run;

-- +goose Down
CREATE INDEX transition_stream_pending ON transition_stream (id) WHERE published_at IS NULL;
CREATE INDEX transition_stream_run ON transition_stream (run_id);
