-- Counting a task's upstreams as they succeed (issue 24). deps_succeeded is
-- how many of a PENDING task's depends_on have SUCCEEDED, counted by the
-- finish of each of them in the statement that records it: the finish that
-- brings the count to cardinality(depends_on) makes the task READY and
-- writes its outbox row in that same statement, without a scheduler pass
-- (the counter join). The child's row lock orders two parents finishing at
-- once: the second one's update waits for the first, and PostgreSQL
-- re-reads the row it then updates (READ COMMITTED), so it adds to the
-- first one's count and exactly one of them sees the whole count.
--
-- The count may fall short, never run over: a parent that succeeds while
-- the task is not PENDING (CANCELLED, UPSTREAM_FAILED) is not counted, and
-- neither are the parents of a run an older binary finished; a task whose
-- count falls short is promoted by the scheduler's pass, which reads its
-- parents' states (as it always did). A task is counted at most once per
-- parent: a parent reaches SUCCEEDED once (it has no way out of it).
--
-- The planner's statistics of the small tables: a table that was never
-- analysed is planned as ten pages whatever it holds, and an empty
-- workflow_pauses (nearly always empty) so planned made a claim's cached
-- plan scan every READY task. ANALYZE records that they are empty (or
-- small); autovacuum keeps it up to date as they grow past its threshold.
--
-- Expand: a column with a default, which old binaries neither read nor
-- write (their finishes leave the count short, which is safe).
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE task_runs ADD COLUMN deps_succeeded integer NOT NULL DEFAULT 0;
ANALYZE workflow_pauses;
ANALYZE installation;
ANALYZE schedules;

-- +goose Down
ALTER TABLE task_runs DROP COLUMN deps_succeeded;
