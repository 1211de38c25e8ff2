package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core"
)

// This file holds what the finish of a SUCCEEDED or CANCELLED attempt does
// beside recording it (finish.go): the counter join, which promotes the
// children whose last upstream it is, and the settle of a run whose only
// task succeeded (mode 92).

// finishDoneTail is what qFinishDone and qFinishDoneOne do after
// recording their SUCCEEDED and CANCELLED rows (they take no run lock):
//
//   - The counter join (kids, counted): each PENDING child of a task that
//     SUCCEEDED counts it (deps_succeeded, migration 00014), and the one
//     whose count reaches cardinality(depends_on) becomes READY (token
//     bumped) with its outbox row and history row, in a run that is not
//     cancelled and not fail_fast (a fail_fast run's children are the
//     scheduler's: its pass cancels the rest of a failing run under the
//     run's lock). The child's row lock orders parents finishing at once,
//     and the count each adds is the latest committed one (READ COMMITTED
//     re-reads a row it waited for), so exactly one of them sees the whole
//     count. A count that falls short (see the migration) leaves the child
//     to the scheduler's pass, which reads the parents' states.
//   - A run whose only task SUCCEEDED settles here (solo, settled): state
//     SUCCEEDED, started when its task was claimed, finished now, unless
//     it was cancelled or another transaction holds its row (SKIP LOCKED:
//     a finish never waits for a run lock; such a run is left to the
//     schedulers). Its only task's row is this statement's (locked), so no
//     other write can change what the run's state derives from; and the run
//     is open (a run settles only with no task active, and this one's was
//     RUNNING), so the statement does not ask (a finished_at IS NULL could
//     have the planner read the run through the index of every open run).
//     Each row of a run it settled returns the run's workflow, created_at
//     and finished_at (FinishResult.Run: the run-duration histogram).
//   - The schedulers are named the runs left to them (woken): every run of
//     the statement except those it settled, and those in which it
//     promoted every child it counted while the run was already past
//     PENDING (nothing is left for a pass there: the promoted task will
//     finish and name its run in turn, or wait for its admission).
//   - The schedulers are asked for an admission round (AdmitWake, naming
//     no run: no pass is needed for it) when the statement gave back a
//     flow-control slot (a finished task with a concurrency key, a settled
//     run with a run-level key) or promoted a child that waits for its
//     admission: the scheduler's turn that follows runs it (store.Admit).
//   - A promotion wakes the publishers (OutboxChannel), in the same
//     notifying statement.
const finishDoneTail = `, kids AS MATERIALIZED (
    SELECT k.id, k.state AS from_state, count(*) AS n, min(fin.worker) AS actor
      FROM fin CROSS JOIN LATERAL (
               SELECT c.id, c.state FROM task_runs c
                WHERE c.run_id = fin.run_id AND c.state = $16::text AND fin.task_name = ANY (c.depends_on)) k
     WHERE fin.state = 'SUCCEEDED'
     GROUP BY k.id, k.state
), counted AS (
    UPDATE task_runs c
       SET deps_succeeded = c.deps_succeeded + k.n,
           state = CASE WHEN ` + joinComplete + ` THEN 'READY' ELSE c.state END,
           fencing_token = CASE WHEN ` + joinComplete + ` THEN c.fencing_token + 1 ELSE c.fencing_token END,
           ready_at = CASE WHEN ` + joinComplete + ` THEN now() ELSE c.ready_at END,
           flow_wait = CASE WHEN ` + joinComplete + ` THEN ` + flowWaitC + ` ELSE c.flow_wait END
      FROM kids k, workflow_runs r
     WHERE c.id = k.id AND c.state = k.from_state AND r.id = c.run_id
 RETURNING c.id, c.run_id, c.task_name, c.handler, c.fencing_token, c.attempt, c.state, k.actor, r.state AS run_state, c.flow_wait
), ob AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
    SELECT id, fencing_token, ` + dispatchPayloadSQL + `
      FROM counted WHERE state = 'READY' AND flow_wait IS NULL
    ON CONFLICT (task_run_id, fencing_token_snapshot, dispatch) DO NOTHING
), pev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'PENDING', 'READY', attempt, fencing_token, actor, 'dependencies succeeded'
      FROM counted WHERE state = 'READY'
), solo AS (
    SELECT fin.run_id, fin.started_at FROM fin
     WHERE fin.state = 'SUCCEEDED'
       AND NOT EXISTS (SELECT 1 FROM task_runs o WHERE o.run_id = fin.run_id AND o.id <> fin.id)
), settled AS (
    UPDATE workflow_runs r
       SET state = 'SUCCEEDED', started_at = coalesce(r.started_at, s.started_at), finished_at = now()
      FROM solo s
     WHERE r.id = s.run_id AND r.cancel_requested_at IS NULL
       AND r.id = ANY (ARRAY(SELECT l.id FROM solo s2 CROSS JOIN LATERAL (
                                SELECT l.id FROM workflow_runs l WHERE l.id = s2.run_id FOR UPDATE SKIP LOCKED) l))
 RETURNING r.id, r.concurrency_key IS NOT NULL AS slot, r.workflow_name, r.created_at, r.finished_at
), woken AS (
    SELECT f.run_id FROM fin f
     WHERE f.run_id NOT IN (SELECT id FROM settled)
       AND NOT (EXISTS (SELECT 1 FROM counted p WHERE p.run_id = f.run_id)
                AND NOT EXISTS (SELECT 1 FROM counted p WHERE p.run_id = f.run_id
                                   AND (p.state <> 'READY' OR p.run_state = 'PENDING')))
)` + finishNotify + `, nob AS (
    SELECT pg_notify('` + OutboxChannel + `', '') WHERE EXISTS (SELECT 1 FROM counted WHERE state = 'READY' AND flow_wait IS NULL)
), adw AS (
    SELECT pg_notify('` + TasksChannel + `', '` + AdmitWake + `')
     WHERE EXISTS (SELECT 1 FROM fin WHERE slot) OR EXISTS (SELECT 1 FROM settled WHERE slot)
        OR EXISTS (SELECT 1 FROM counted WHERE state = 'READY' AND flow_wait IS NOT NULL)
)
SELECT fin.id, fin.fencing_token AS token, fin.state, (SELECT count(*) FROM n) + (SELECT count(*) FROM adw) AS notified,
       (SELECT count(*) FROM nob) AS promoted,
       st.workflow_name AS run_workflow, st.created_at AS run_created_at, st.finished_at AS run_finished_at
  FROM fin LEFT JOIN settled st ON st.id = fin.run_id`

// joinComplete is true for a child c counted in kids k, of run r, that
// this count completes (every upstream SUCCEEDED) in a run whose children
// a finish may promote, when c is plain (plainChildSQL): a child with a
// when, a trigger rule, on_failure or for_each is counted but left to the
// scheduler's pass (decideTasks), which the finish names the run to.
const joinComplete = `(c.deps_succeeded + k.n >= cardinality(c.depends_on) AND r.cancel_requested_at IS NULL AND NOT r.fail_fast)` + ` AND ` + plainChildSQL

// qFinishDone records a batch of SUCCEEDED and CANCELLED outcomes
// (finishDoneTail), in a statement that commits on its own.
const qFinishDone = `
WITH fin AS (
    UPDATE task_runs t
       SET ` + finishSet + `
      FROM ` + finishBatchFrom + finishFence + finishReturning + finishRecords + finishDoneTail

// qFinishDoneOne is qFinishDone for one request, with scalar parameters.
const qFinishDoneOne = `
WITH fin AS (
    UPDATE task_runs t
       SET ` + finishSet + `
      FROM ` + finishOneFrom + finishFence + finishReturning + finishRecords + finishDoneTail

// finishPlain records the SUCCEEDED and CANCELLED requests idx in one
// statement that commits on its own and takes no run lock: a held run
// never delays them (a success buries nothing). It goes out in one round
// trip with its plan of key lookups (inOneTrip, KeyPlan).
func (s *Store) finishPlain(ctx context.Context, b *finishBatch, idx []int) {
	if len(idx) == 0 {
		return
	}
	b.tried += len(idx)
	query, args := qFinishDone, append(finishArgs(b.reqs, idx), string(core.TaskPending))
	if len(idx) == 1 {
		query, args = qFinishDoneOne, finishOneArgs(b.reqs[idx[0]])
	}
	var rows []finishRow
	err := s.inOneTrip(ctx, tripSettings{KeyPlan: true}, query, args, func(r pgx.Rows) error {
		var err error
		rows, err = pgx.CollectRows(r, pgx.RowToStructByName[finishRow])
		return err
	})
	if err != nil {
		err = unanswered("finish", err)
	}
	if err == nil {
		b.noteSettled(rows)
	}
	s.settle(ctx, b, idx, byKey(rows), err)
}
