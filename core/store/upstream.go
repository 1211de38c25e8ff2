package store

// This file holds the SQL shared by every statement that writes DEAD (qFinish,
// qReap, qDropQuarantined) and by the scheduler's pass (qUpstreamFail): the descendants of a
// DEAD task, over depends_on within its run, become UPSTREAM_FAILED in the
// same statement, and return to PENDING when a requeue leaves none of their
// ancestors DEAD (qRequeue, qUpstreamRevive).

// buryDownstream is the CTE list, for a WITH RECURSIVE statement (the caller
// writes "WITH RECURSIVE" and the comma before it), that moves to
// UPSTREAM_FAILED every PENDING task downstream (transitively, within its
// run) of the tasks of the caller's CTE buried (id, actor text), stopping
// at a task whose trigger rule lets it run below a DEAD task
// (toleratingRulesSQL: the scheduler decides it), the tasks
// the statement made DEAD and who did it. Each task moved gets an error and
// an audit row naming its DEAD ancestor. The CTEs are uf_down (run_id,
// task_name, root, actor), uf (the tasks moved: id, run_id, attempt,
// fencing_token, error, actor) and uf_ev. The update is guarded by state: a
// task a concurrent statement moved first (a cancel, fail_fast) is left
// alone.
const buryDownstream = `uf_down (run_id, task_name, root, actor) AS (
    SELECT t.run_id, t.task_name, t.task_name, b.actor FROM buried b JOIN task_runs t ON t.id = b.id
    UNION
    SELECT c.run_id, c.task_name, d.root, d.actor
      FROM uf_down d JOIN task_runs c ON c.run_id = d.run_id AND d.task_name = ANY (c.depends_on)
     WHERE c.trigger_rule NOT IN ` + toleratingRulesSQL + `
), uf AS (
    UPDATE task_runs t
       SET state = 'UPSTREAM_FAILED', finished_at = now(), next_attempt_at = NULL,
           error = 'upstream task ' || d.root || ' is DEAD'
      FROM (SELECT run_id, task_name, min(root) AS root, min(actor) AS actor FROM uf_down GROUP BY run_id, task_name) d
     WHERE t.run_id = d.run_id AND t.task_name = d.task_name AND t.state = 'PENDING'
 RETURNING t.id, t.run_id, t.attempt, t.fencing_token, t.error, d.actor
), uf_ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'PENDING', 'UPSTREAM_FAILED', attempt, fencing_token, actor, error FROM uf
)`

// toleratingRulesSQL lists the trigger rules that let a task run below a
// DEAD task (core.TriggerRule.ToleratesFailure; TestToleratingRulesAreCoresList
// holds the two together).
const toleratingRulesSQL = `('all_done', 'one_success')`

// qUpstreamFail is the scheduler's catch-up of buryDownstream for the locked,
// uncancelled runs $1, as actor $2: a task that died where no statement
// marked its descendants (an older binary wrote the DEAD, or a requeue
// revived a descendant while a second ancestor was dying) leaves them
// PENDING, and this pass buries them. It returns how many it moved.
const qUpstreamFail = `
WITH RECURSIVE buried (id, actor) AS (
    SELECT d.id, $2::text FROM task_runs d WHERE d.run_id = ANY ($1::uuid[]) AND d.state = 'DEAD'
), ` + buryDownstream + `
SELECT count(*) FROM uf`

// qUpstreamRevive returns to PENDING (token bumped, audited) the
// UPSTREAM_FAILED tasks of the locked, uncancelled runs $1 none of whose
// ancestors is DEAD: RequeueMany revives them with the requeue, this catches
// a requeue by an older binary, which does not know the state.
const qUpstreamRevive = `
WITH RECURSIVE blocked (run_id, task_name) AS (
    SELECT d.run_id, d.task_name FROM task_runs d WHERE d.run_id = ANY ($1::uuid[]) AND d.state = 'DEAD'
    UNION
    SELECT c.run_id, c.task_name FROM blocked b JOIN task_runs c ON c.run_id = b.run_id AND b.task_name = ANY (c.depends_on)
), cand AS (
    SELECT t.id, t.state FROM task_runs t
     WHERE t.run_id = ANY ($1::uuid[]) AND t.state = 'UPSTREAM_FAILED'
       AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.run_id = t.run_id AND b.task_name = t.task_name)
), c AS (
    UPDATE task_runs t SET ` + setRequeued + `
      FROM cand WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, t.fencing_token
), c_logs AS (` + shiftLogsOfC + `
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'UPSTREAM_FAILED', 'PENDING', 0, fencing_token, $2, 'no upstream task of it is DEAD any more' FROM c
)
SELECT count(*) FROM c`
