-- The W3C traceparent of a traced trigger (issue 28): the span context the
-- run's trace continues. The trigger writes it when tracing is on (or the
-- caller's context carries a span); the dispatch payload copies it into
-- each message (core.Dispatch.Traceparent) so that the publisher's and the
-- workers' spans join the run's trace. NULL: not traced (the default),
-- nothing is added to the messages.
--
-- Expand: a nullable column old binaries never read. It alters
-- workflow_runs alone, waiting at most half of deadlock_timeout for its
-- lock (`ffctl migrate` retries a lock timeout).
-- flowforge:compat-floor 2

-- +goose Up
SELECT set_config('lock_timeout', least(200, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)::text || 'ms', true);
ALTER TABLE workflow_runs ADD COLUMN traceparent text;

-- +goose Down
ALTER TABLE workflow_runs DROP COLUMN traceparent;
