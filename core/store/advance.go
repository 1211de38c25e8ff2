package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// Cursor pages through open runs in creation order across passes.
type Cursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// AdvanceResult says what one Advance pass did.
type AdvanceResult struct {
	Runs              int // open runs examined (and locked) by this pass
	Promoted          int // PENDING -> READY
	RetriesDue        int // RETRYING -> READY
	FailFastCancelled int // tasks cancelled because a fail_fast run failed
	FailFastRevived   int // CANCELLED -> PENDING: a requeued fail_fast run has no DEAD task any more
	FailFastStopped   int // fail_fast runs that failed in this pass with tasks running (workers told on CancelChannel)
	UpstreamFailed    int // PENDING -> UPSTREAM_FAILED: a DEAD ancestor no statement had buried them for
	UpstreamRevived   int // UPSTREAM_FAILED -> PENDING: no ancestor DEAD any more (an older binary's requeue)
	Skipped           int // PENDING -> SKIPPED: a when was false, a trigger rule or on_failure skipped it
	Expanded          int // task runs inserted by the for_each tasks expanded (READY with their outbox rows)
	ForEachEnded      int // for_each tasks ended with their elements (RUNNING -> SUCCEEDED, DEAD or CANCELLED)
	FlowWaiting       int // made READY waiting for their admission (flow control: Admit)
	HeldEnded         int // sleeps due, waits timed out, child runs ended (RUNNING -> SUCCEEDED, SKIPPED, RETRYING, DEAD or CANCELLED)
	HeldDead          int // of HeldEnded, those made DEAD (a wait timed out on its last attempt, a failed child run)
	EventsMatched     int // waits that started after their event came (RUNNING -> SUCCEEDED)
	RunsChanged       int // runs whose derived state changed
	RunsSettled       int // runs that settled (finished_at set)
	// Settled are the runs this pass settled (RunsSettled of them).
	Settled []SettledRun
	// Held, of a targeted pass (AdvanceRuns), are the open runs named that
	// another transaction held, in id order: not advanced, not touched, to
	// be passed again later. Always nil from Advance (a full sweep skips
	// such runs and its next full sweep comes back to them).
	Held []uuid.UUID
	// Traced are the promotions (qPromote: dependencies succeeded, retries
	// due) of traced runs; nil when no run of the pass is traced.
	Traced []TracedPromotion
	// Next is where the following pass should start; nil when this pass
	// reached the end of the open runs.
	Next *Cursor
}

type openRun struct {
	ID              uuid.UUID     `db:"id"`
	CreatedAt       time.Time     `db:"created_at"`
	State           core.RunState `db:"state"`
	CancelRequested bool          `db:"cancel_requested"`
	FailFast        bool          `db:"fail_fast"`
	// RunWait: the run waits for its run-level concurrency slot (Admit);
	// no task of it starts meanwhile.
	RunWait bool `db:"run_wait"`
}

const qLockOpenRuns = `
SELECT id, created_at, state, cancel_requested_at IS NOT NULL AS cancel_requested, fail_fast, run_wait
  FROM workflow_runs
 WHERE finished_at IS NULL AND (created_at, id) > ($1, $2)
 ORDER BY created_at, id
 LIMIT $3
   FOR UPDATE SKIP LOCKED`

const qFailFast = `
WITH cand AS (
    SELECT t.id, t.state FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
     WHERE t.run_id = ANY ($1::uuid[]) AND r.fail_fast AND t.state IN ('PENDING', 'READY', 'RETRYING') AND NOT t.on_failure
       AND EXISTS (SELECT 1 FROM task_runs d WHERE d.run_id = t.run_id AND d.state = 'DEAD')
), c AS (
    UPDATE task_runs t SET state = 'CANCELLED', finished_at = now(), next_attempt_at = NULL
      FROM cand WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, cand.state AS from_state, t.attempt, t.fencing_token
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, from_state, 'CANCELLED', attempt, fencing_token, $2, 'fail_fast: a task of the run is DEAD' FROM c
)
SELECT count(*) FROM c`

// qFailFastRevive returns to PENDING (token bumped, fresh budget, audited)
// the CANCELLED tasks of the locked, uncancelled fail_fast runs that have no
// DEAD task: in such a run only fail_fast cancels, and no DEAD task means an
// operator requeued the one that failed it. RequeueMany revives the tasks
// CANCELLED by then; this catches a running task that was told to stop
// before the requeue and finished CANCELLED after it.
const qFailFastRevive = `
WITH cand AS (
    SELECT t.id, t.state FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
     WHERE t.run_id = ANY ($1::uuid[]) AND r.fail_fast AND r.cancel_requested_at IS NULL AND t.state = 'CANCELLED'
       AND NOT EXISTS (SELECT 1 FROM task_runs d WHERE d.run_id = t.run_id AND d.state = 'DEAD')
), c AS (
    UPDATE task_runs t SET ` + setRequeued + `
      FROM cand WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, t.fencing_token
), c_logs AS (` + shiftLogsOfC + `
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'CANCELLED', 'PENDING', 0, fencing_token, $2, 'fail_fast: the run was requeued and no task of it is DEAD' FROM c
)
SELECT count(*) FROM c`

// qPromote makes eligible tasks READY and writes their outbox rows in one
// statement: plain PENDING tasks whose dependencies all SUCCEEDED (the
// others are decided by decideTasks), and RETRYING tasks whose backoff
// elapsed (database clock), of the locked, uncancelled runs. Each promotion bumps the fencing token: the outbox row is unique per
// (task run, token), and only a message carrying that token can claim.
const qPromote = `
WITH cand AS (
    SELECT t.id, t.state FROM task_runs t
     WHERE t.run_id = ANY ($1::uuid[]) AND t.state = 'PENDING' AND ` + plainTaskSQL + `
       AND NOT EXISTS (SELECT 1 FROM task_runs p
                        WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on) AND p.state <> 'SUCCEEDED')
    UNION ALL
    SELECT t.id, t.state FROM task_runs t
     WHERE t.run_id = ANY ($1::uuid[]) AND t.state = 'RETRYING' AND t.next_attempt_at <= now() AND t.kind = 'task'
), promoted AS (
    UPDATE task_runs t
       SET state = 'READY', fencing_token = t.fencing_token + 1, ready_at = now(), next_attempt_at = NULL,
           flow_wait = ` + flowWaitT + `
      FROM cand
     WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, t.task_name, t.handler, t.fencing_token, t.attempt, cand.state AS from_state, t.flow_wait
), ob AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
    SELECT id, fencing_token,
           ` + dispatchPayloadSQL + `
      FROM promoted WHERE flow_wait IS NULL
    ON CONFLICT (task_run_id, fencing_token_snapshot, dispatch) DO NOTHING
    RETURNING task_run_id, payload
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, from_state, 'READY', attempt, fencing_token, $2,
           CASE from_state WHEN 'PENDING' THEN 'dependencies succeeded' ELSE 'retry due' END
      FROM promoted
)
SELECT count(*) FILTER (WHERE from_state = 'PENDING') AS promoted,
       count(*) FILTER (WHERE from_state = 'RETRYING') AS retries,
       count(*) FILTER (WHERE flow_wait IS NOT NULL) AS waiting,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('dispatch', ob.payload, 'attempt', p.attempt + 1)), '[]')
          FROM ob JOIN promoted p ON p.id = ob.task_run_id
         WHERE ob.payload->>'traceparent' IS NOT NULL) AS traced
  FROM promoted`

// qRunCounts counts each run's tasks by state, in one snapshot, and also
// counts the PENDING tasks a pass would promote or decide now
// ("eligible", decidableSQL: every upstream task ended, or on_failure):
// the promotion and the decisions ran on earlier snapshots, so a parent
// that finished in between leaves an eligible child that the next pass
// (woken by that finish's NOTIFY) takes. Such a run must not be settled
// now.
const qRunCounts = `
SELECT t.run_id, t.state,
       count(*) AS n,
       count(*) FILTER (WHERE t.state = 'PENDING' AND ` + decidableSQL + `) AS eligible
  FROM task_runs t WHERE t.run_id = ANY ($1::uuid[]) GROUP BY t.run_id, t.state`

// qUpdateRuns writes the derived states ($2) of the runs $1, settling
// those $3 names, and returns the runs it settled (SettledRun).
const qUpdateRuns = `
WITH w AS (
    UPDATE workflow_runs r
       SET state = u.state,
           started_at = CASE WHEN u.state <> 'PENDING' THEN coalesce(r.started_at, now()) ELSE r.started_at END,
           finished_at = CASE WHEN u.settled THEN now() END
      FROM unnest($1::uuid[], $2::text[], $3::bool[]) AS u(id, state, settled)
     WHERE r.id = u.id
 RETURNING r.workflow_name, r.state, r.created_at, r.finished_at
)
SELECT workflow_name, state, created_at, finished_at FROM w WHERE finished_at IS NOT NULL`

// Advance runs one scheduler pass over up to limit open runs after cursor
// (nil: from the start), in ONE transaction that begins after whatever woke
// it committed: it locks the runs (FOR UPDATE SKIP LOCKED, so concurrent
// schedulers divide them) and advances them (advanceLocked). It is the
// scheduler's full sweep, the safety net behind AdvanceRuns: a skipped run
// is another pass's, and the next full sweep comes back to it.
func (s *Store) Advance(ctx context.Context, after *Cursor, limit int, actor string) (AdvanceResult, error) {
	if err := advanceEdges(); err != nil {
		return AdvanceResult{}, err
	}
	cur := Cursor{}
	if after != nil {
		cur = *after
	}
	var res AdvanceResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		runs, err := lockOpenRuns(ctx, tx, cur, limit, &res)
		if err != nil || len(runs) == 0 {
			return err
		}
		return s.advanceLocked(ctx, tx, runs, actor, &res)
	})
	if err != nil {
		return AdvanceResult{}, err
	}
	return res, nil
}

// advanceLocked advances the runs tx locked: it buries as UPSTREAM_FAILED
// the PENDING descendants of DEAD tasks that no statement buried yet and
// returns to PENDING the UPSTREAM_FAILED tasks with no DEAD ancestor left
// (both catch writes of older binaries), cancels the other unstarted tasks
// of failed fail_fast runs, returns to PENDING the tasks fail_fast
// cancelled in fail_fast runs an operator requeued (no task DEAD any
// more), ends the for_each tasks whose elements have ended, decides the
// tasks that are not plain (decideTasks: when, trigger rules, on_failure,
// for_each and their expansion), promotes eligible plain tasks with their
// outbox rows, derives each run's state with core.DeriveRunState, and
// settles runs with no active task. It notifies, in one statement,
// publishers (OutboxChannel) when it wrote outbox rows and workers
// (CancelChannel) when a fail_fast run failed while some of its tasks
// run, so that they stop at once rather than at their next heartbeat.
func (s *Store) advanceLocked(ctx context.Context, tx *sqlx.Tx, runs []openRun, actor string, res *AdvanceResult) error {
	ids, live, cancelled := splitRuns(runs)
	if err := reconcileTasks(ctx, tx, runs, live, cancelled, actor, res); err != nil {
		return err
	}
	kids, err := s.endHeld(ctx, tx, ids, live, stoppable(runs), actor, res)
	if err != nil {
		return err
	}
	if err := joinForEach(ctx, tx, ids, actor, res); err != nil {
		return err
	}
	if err := s.decideTasks(ctx, tx, live, actor, res); err != nil {
		return err
	}
	if err := promoteTasks(ctx, tx, live, actor, res); err != nil {
		return err
	}
	stop, err := settleRuns(ctx, tx, runs, ids, res)
	if err != nil {
		return err
	}
	res.FailFastStopped = len(stop)
	var notices []notice
	if res.Promoted+res.RetriesDue+res.Expanded > 0 {
		notices = append(notices, outboxNotice())
	}
	if len(stop) > 0 || len(kids) > 0 {
		notices = append(notices, cancelNotice(append(stop, kids...)))
	}
	notices = append(notices, runsNotices(kids)...)
	return notifyAll(ctx, tx, notices...)
}

// advanceEdges checks, before any SQL runs, that every edge a pass writes is
// legal (core.CheckTransition's error otherwise).
func advanceEdges() error {
	edges := [][2]core.TaskState{
		{core.TaskPending, core.TaskReady},
		{core.TaskRetrying, core.TaskReady},
		{core.TaskCancelled, core.TaskPending},
		{core.TaskPending, core.TaskUpstreamFailed},
		{core.TaskUpstreamFailed, core.TaskPending},
		// decideTasks, expandForEach, joinForEach
		{core.TaskPending, core.TaskSkipped},
		{core.TaskPending, core.TaskDead},
		{core.TaskPending, core.TaskRunning},
		{core.TaskPending, core.TaskSucceeded},
		{core.TaskDead, core.TaskPending},
		{core.TaskRunning, core.TaskSucceeded},
		{core.TaskRunning, core.TaskDead},
		{core.TaskRunning, core.TaskCancelled},
	}
	for _, e := range edges {
		if err := mustEdge(e[0], e[1]); err != nil {
			return err
		}
	}
	return nil
}

// lockOpenRuns locks up to limit open runs after cur (qLockOpenRuns), in
// creation order, and records in res how many it locked and, when it
// locked limit, where the next pass starts.
func lockOpenRuns(ctx context.Context, tx *sqlx.Tx, cur Cursor, limit int, res *AdvanceResult) ([]openRun, error) {
	var runs []openRun
	if err := tx.SelectContext(ctx, &runs, qLockOpenRuns, cur.CreatedAt, cur.ID, limit); err != nil {
		return nil, fmt.Errorf("lock open runs: %w", err)
	}
	res.Runs = len(runs)
	if len(runs) == limit {
		last := runs[len(runs)-1]
		res.Next = &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return runs, nil
}

// splitRuns returns the ids of runs (all of them), of those not cancelled
// and not waiting for their run-level concurrency slot (live) and of those
// cancelled, each in the order of runs.
// stoppable returns the runs whose held tasks may have to stop
// (qStopHeld): the cancelled ones and the fail_fast ones.
func stoppable(runs []openRun) []uuid.UUID {
	var out []uuid.UUID
	for _, r := range runs {
		if r.CancelRequested || r.FailFast {
			out = append(out, r.ID)
		}
	}
	return out
}

func splitRuns(runs []openRun) (ids, live, cancelled []uuid.UUID) {
	ids = make([]uuid.UUID, 0, len(runs))
	live = make([]uuid.UUID, 0, len(runs))
	for _, r := range runs {
		ids = append(ids, r.ID)
		switch {
		case r.CancelRequested:
			cancelled = append(cancelled, r.ID)
		case !r.RunWait:
			live = append(live, r.ID)
		}
	}
	return ids, live, cancelled
}

// reconcileTasks writes, before the promotion, what the locked runs' states
// ask of their tasks: in the live runs it buries the PENDING descendants
// of DEAD tasks, revives the UPSTREAM_FAILED tasks with no DEAD ancestor
// left, cancels the unstarted tasks of failed fail_fast runs and revives
// those fail_fast cancelled in requeued ones; in the cancelled runs it
// cancels every task that could still start. It records the counts in res.
func reconcileTasks(ctx context.Context, tx *sqlx.Tx, runs []openRun, live, cancelled []uuid.UUID, actor string, res *AdvanceResult) error {
	// The descendants of a DEAD task are UPSTREAM_FAILED before fail_fast
	// cancels the rest of the run: fail_fast never takes them.
	if err := tx.GetContext(ctx, &res.UpstreamFailed, qUpstreamFail, uuidArray(live), actor); err != nil {
		return fmt.Errorf("bury descendants of dead tasks: %w", err)
	}
	if err := tx.GetContext(ctx, &res.UpstreamRevived, qUpstreamRevive, uuidArray(live), actor); err != nil {
		return fmt.Errorf("revive descendants of requeued tasks: %w", err)
	}
	if err := failFastTasks(ctx, tx, runs, actor, res); err != nil {
		return err
	}
	if len(cancelled) > 0 {
		// A cancelled run's task that was running when the run was
		// cancelled may since have gone RETRYING (its handler failed or
		// its lease was reaped), and a promotion may have raced the
		// cancel: nothing of a cancelled run may start again.
		var n int
		if err := tx.GetContext(ctx, &n, qCancelTasks, uuidArray(cancelled), actor, "run cancelled"); err != nil {
			return fmt.Errorf("cancel tasks of cancelled runs: %w", err)
		}
	}
	return nil
}

// failFastTasks cancels the unstarted tasks of the locked live fail_fast
// runs that have a DEAD task (qFailFast) and revives those fail_fast
// cancelled in the ones that have none any more (qFailFastRevive). Both
// statements only touch fail_fast runs, so a pass without one (most
// targeted passes) skips them.
func failFastTasks(ctx context.Context, tx *sqlx.Tx, runs []openRun, actor string, res *AdvanceResult) error {
	var ff []uuid.UUID
	for _, r := range runs {
		if r.FailFast && !r.CancelRequested {
			ff = append(ff, r.ID)
		}
	}
	if len(ff) == 0 {
		return nil
	}
	if err := tx.GetContext(ctx, &res.FailFastCancelled, qFailFast, uuidArray(ff), actor); err != nil {
		return fmt.Errorf("fail-fast cancel: %w", err)
	}
	if err := tx.GetContext(ctx, &res.FailFastRevived, qFailFastRevive, uuidArray(ff), actor); err != nil {
		return fmt.Errorf("fail-fast revive: %w", err)
	}
	return nil
}

// promoteTasks makes the eligible tasks of the live runs READY with their
// outbox rows (qPromote) and records the counts in res.
func promoteTasks(ctx context.Context, tx *sqlx.Tx, live []uuid.UUID, actor string, res *AdvanceResult) error {
	var pr struct {
		Promoted int  `db:"promoted"`
		Retries  int  `db:"retries"`
		Waiting  int  `db:"waiting"`
		Traced   JSON `db:"traced"`
	}
	if err := tx.GetContext(ctx, &pr, qPromote, uuidArray(live), actor); err != nil {
		return fmt.Errorf("promote tasks: %w", err)
	}
	res.Promoted += pr.Promoted
	res.RetriesDue = pr.Retries
	res.FlowWaiting += pr.Waiting
	traced, err := readTraced(pr.Traced)
	if err != nil {
		return fmt.Errorf("promote tasks: %w", err)
	}
	res.Traced = append(res.Traced, traced...)
	return nil
}

// runStateUpdates are the runs whose state a pass writes (qUpdateRuns),
// column by column.
type runStateUpdates struct {
	ids     []uuid.UUID
	states  []string
	settled []bool
}

// settleRuns derives the state of each locked run (ids are theirs) from
// its task counts, writes the runs whose state changed or that settled,
// and records the counts in res. It returns the fail_fast runs that fail
// in this pass with tasks running, whose workers are to be told.
func settleRuns(ctx context.Context, tx *sqlx.Tx, runs []openRun, ids []uuid.UUID, res *AdvanceResult) ([]uuid.UUID, error) {
	byRun, eligible, err := runTaskCounts(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	u, stop := deriveRuns(runs, byRun, eligible, res)
	if len(u.ids) > 0 {
		var settled []SettledRun
		if err := tx.SelectContext(ctx, &settled, qUpdateRuns, uuidArray(u.ids), u.states, u.settled); err != nil {
			return nil, fmt.Errorf("update run states: %w", err)
		}
		res.Settled = append(res.Settled, settled...)
	}
	return stop, nil
}

// runTaskCounts reads, in one snapshot (qRunCounts), the task counts by
// state of the runs ids, and how many PENDING tasks of each are eligible
// for promotion.
func runTaskCounts(ctx context.Context, tx *sqlx.Tx, ids []uuid.UUID) (map[uuid.UUID]core.TaskCounts, map[uuid.UUID]int, error) {
	var counts []struct {
		RunID    uuid.UUID      `db:"run_id"`
		State    core.TaskState `db:"state"`
		N        int            `db:"n"`
		Eligible int            `db:"eligible"`
	}
	if err := tx.SelectContext(ctx, &counts, qRunCounts, uuidArray(ids)); err != nil {
		return nil, nil, fmt.Errorf("count task states: %w", err)
	}
	byRun := make(map[uuid.UUID]core.TaskCounts, len(ids))
	eligible := make(map[uuid.UUID]int, len(ids))
	for _, c := range counts {
		eligible[c.RunID] += c.Eligible
		if byRun[c.RunID] == nil {
			byRun[c.RunID] = core.TaskCounts{}
		}
		byRun[c.RunID][c.State] = c.N
	}
	return byRun, eligible, nil
}

// deriveRuns derives each run's state with core.DeriveRunState and
// whether it settles (no active task, and no PENDING task eligible unless
// the run is cancelled), counting changes in res. It returns the runs to
// write and the fail_fast runs failing now with tasks running.
func deriveRuns(runs []openRun, byRun map[uuid.UUID]core.TaskCounts, eligible map[uuid.UUID]int, res *AdvanceResult) (runStateUpdates, []uuid.UUID) {
	var u runStateUpdates
	var stop []uuid.UUID // fail_fast runs failing now with tasks running
	for _, r := range runs {
		tc := byRun[r.ID]
		state := core.DeriveRunState(tc, r.CancelRequested)
		settled := core.RunSettled(tc) && (eligible[r.ID] == 0 || r.CancelRequested)
		if r.FailFast && state == core.RunFailed && r.State != core.RunFailed && tc[core.TaskRunning] > 0 {
			stop = append(stop, r.ID)
		}
		if state == r.State && !settled {
			continue
		}
		if state != r.State {
			res.RunsChanged++
		}
		if settled {
			res.RunsSettled++
		}
		u.ids = append(u.ids, r.ID)
		u.states = append(u.states, string(state))
		u.settled = append(u.settled, settled)
	}
	return u, stop
}
