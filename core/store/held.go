package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/expr"
)

// This file holds what the scheduler's pass does with the tasks it holds
// without a worker (core.KindSleep, core.KindWait, core.KindWorkflow):
// how one starts (heldDecision, in the decision's transaction: a sleep's
// due time on the database clock, a wait's event and key and a match of
// an event kept from before it started, a child run triggered with a key
// derived from the task run and its fencing token), how one ends
// (qEndHeld: a sleep due, a wait's timeout, a child run ended), how one
// waits again (rearmWaits, in qEndHeld) and how a cancelled or failed run stops them
// (qStopHeld). An event's delivery to the waits already RUNNING is
// SendEvent's (events.go).
//
// A held task is RUNNING with no lease and no worker: no reaper, claim or
// redispatch touches it (each of them reads only kind 'task' rows with a
// lease or an outbox row, which a held task never has).

// MaxChildDepthDefault bounds how deep child runs nest when
// Options.MaxChildDepth is 0: a run started by no task has depth 0, its
// children 1, and a task that would start a child deeper than the bound
// is DEAD.
const MaxChildDepthDefault = 10

// childKeyPrefix leads the idempotency key of a child run: the key is
// childKeyPrefix + the parent task run's id + ":" + the fencing token of
// the attempt that starts it. A pass replayed after a lost commit derives
// the same key and gets the same run; a requeue or a retry bumps the
// token and starts a new child.
const childKeyPrefix = "flowforge.child:"

// childKey is the idempotency key of the child run task's attempt with
// fencing token token starts.
func childKey(task uuid.UUID, token int64) string {
	return fmt.Sprintf("%s%s:%d", childKeyPrefix, task, token)
}

// heldDecision decides how a held task c, which runs (d), starts: d made
// RUNNING with its due time, its event and key, or its child run; DEAD
// with the error when an expression fails, a key is not a key, the child
// would be deeper than the bound or its trigger is refused. The error is
// the database's.
func (s *Store) heldDecision(ctx context.Context, in *runInputs, c candidate, d decided) (decided, error) {
	ri, err := in.load(ctx, c.RunID)
	if err != nil {
		return decided{}, err
	}
	t, ok := ri.tasks[c.Name]
	if !ok {
		return dead(d, fmt.Sprintf("%s: the task's definition is not in its version", c.Kind)), nil
	}
	input, up := ri.input(c.Name)
	d.to = core.TaskRunning
	switch c.Kind {
	case core.KindSleep:
		return sleepDecision(ctx, t, input, up, d), nil
	case core.KindWait:
		return waitDecision(ctx, t, input, up, d), nil
	case core.KindWorkflow:
		return s.childDecision(ctx, in.tx, ri, t, c, input, up, d)
	}
	return dead(d, fmt.Sprintf("kind %q is not one the scheduler holds", c.Kind)), nil
}

// sleepDecision is d with its due time: now (database clock) + for, or
// until's timestamp.
func sleepDecision(ctx context.Context, t core.TaskDef, input expr.Input, up []string, d decided) decided {
	sp := t.Sleep
	if sp == nil {
		return dead(d, "sleep: the task's definition has no sleep")
	}
	if sp.For != nil {
		ms := time.Duration(*sp.For).Milliseconds()
		d.dueMS = &ms
		d.reason = "sleep: for " + time.Duration(*sp.For).String()
		return d
	}
	prg, err := expr.Compile(sp.Until, expr.Time, up)
	if err != nil {
		return dead(d, "sleep.until: "+err.Error())
	}
	at, err := prg.Time(ctx, input)
	if err != nil {
		return dead(d, "sleep.until: "+err.Error())
	}
	at = at.UTC()
	d.dueAt = &at
	d.reason = "sleep: until " + at.Format(time.RFC3339Nano)
	return d
}

// waitDecision is d with its event, key, timeout and on_timeout.
func waitDecision(ctx context.Context, t core.TaskDef, input expr.Input, up []string, d decided) decided {
	w := t.WaitFor
	if w == nil {
		return dead(d, "wait_for: the task's definition has no wait_for")
	}
	key := ""
	if w.Key != "" {
		prg, err := expr.Compile(w.Key, expr.Key, up)
		if err != nil {
			return dead(d, "wait_for.key: "+err.Error())
		}
		if key, err = prg.Key(ctx, input); err != nil {
			return dead(d, "wait_for.key: "+err.Error())
		}
		if err := core.ValidateEventKey(key); err != nil {
			return dead(d, fmt.Sprintf("wait_for.key: %s: %v", w.Key, err))
		}
	}
	ms := w.WaitTimeout().Milliseconds()
	onTimeout := w.OnTimeout
	if onTimeout == "" {
		onTimeout = core.OnTimeoutFail
	}
	d.dueMS, d.waitEvent, d.waitKey, d.onTimeout = &ms, &w.Event, &key, &onTimeout
	d.reason = fmt.Sprintf("wait_for: event %s with key %q, for at most %s", w.Event, key, w.WaitTimeout())
	return d
}

// childDecision triggers c's child run in tx (behind a savepoint: a
// refused trigger leaves tx usable) and returns d with it, calling the
// Store's MidChildStart hook (Options) once the child is named, inside the
// transaction; DEAD when the
// params expression fails, the child would be too deep, or the trigger is
// refused (an unknown workflow, a drop pause, params it refuses). The
// error is the database's.
func (s *Store) childDecision(ctx context.Context, tx *sqlx.Tx, ri *runInput, t core.TaskDef, c candidate, input expr.Input, up []string, d decided) (decided, error) {
	ch := t.Workflow
	if ch == nil {
		return dead(d, "workflow: the task's definition has no workflow"), nil
	}
	if depth := ri.depth + 1; depth > s.maxChildDepth() {
		return dead(d, fmt.Sprintf("workflow %s: a child run here would be at depth %d, deeper than --max-child-depth %d (a workflow that starts itself, directly or through others?)", ch.Name, depth, s.maxChildDepth())), nil
	}
	params := json.RawMessage(`{}`)
	if ch.Params != "" {
		prg, err := expr.Compile(ch.Params, expr.Object, up)
		if err != nil {
			return dead(d, "workflow.params: "+err.Error()), nil
		}
		if params, err = prg.Object(ctx, input); err != nil {
			return dead(d, "workflow.params: "+err.Error()), nil
		}
	}
	if prev, ok, err := liveChild(ctx, tx, c.ID); err != nil || ok {
		if err != nil {
			return decided{}, err
		}
		// A requeued task whose child run was mended (its DEAD task
		// requeued and run again) takes that child back: starting a new
		// one would run the child's work twice.
		d.child = &prev.ID
		d.reason = fmt.Sprintf("workflow: child run %s of %s taken back (it is %s)", prev.ID, ch.Name, prev.State)
		return d, nil
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT child_run`); err != nil {
		return decided{}, fmt.Errorf("start the child run of task %s: %w", c.ID, err)
	}
	// qDecide bumps a held task's token as it makes it RUNNING: the
	// attempt that starts this child carries c.Token + 1.
	res, err := s.trigger(ctx, SQLQuerier(tx), TriggerRequest{
		Workflow: ch.Name, Params: params, IdempotencyKey: childKey(c.ID, c.Token+1), Actor: "task " + c.ID.String(),
	})
	if err != nil {
		refused := errors.Is(err, ErrWorkflowPaused) || errors.Is(err, core.ErrBadParams) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict)
		if !refused || errors.Is(err, ErrCommitOutcomeUnknown) {
			return decided{}, fmt.Errorf("start the child run of task %s: %w", c.ID, err)
		}
		if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT child_run`); rerr != nil {
			return decided{}, fmt.Errorf("start the child run of task %s: %w", c.ID, rerr)
		}
		return dead(d, fmt.Sprintf("workflow %s: the child run was refused: %v", ch.Name, err)), nil
	}
	if _, err := tx.ExecContext(ctx, qAdoptChild, res.RunID, c.ID, c.RunID, ri.depth+1); err != nil {
		return decided{}, fmt.Errorf("link child run %s to task %s: %w", res.RunID, c.ID, err)
	}
	if s.midChildStart != nil {
		s.midChildStart()
	}
	d.child = &res.RunID
	d.reason = fmt.Sprintf("workflow: child run %s of %s", res.RunID, ch.Name)
	return d, nil
}

// liveChild returns the child run task's earlier attempt started when it
// did not fail: SUCCEEDED (it was mended after its parent task died), or
// still open and not being cancelled (requeued, running again). ok is
// false for none, or for one FAILED, CANCELLED or being cancelled, which a
// new child replaces.
func liveChild(ctx context.Context, tx *sqlx.Tx, task uuid.UUID) (child struct {
	ID    uuid.UUID     `db:"id"`
	State core.RunState `db:"state"`
}, ok bool, err error) {
	err = tx.GetContext(ctx, &child, `
SELECT c.id, c.state FROM task_runs t JOIN workflow_runs c ON c.id = t.child_run_id
 WHERE t.id = $1 AND (c.state = 'SUCCEEDED' OR (c.finished_at IS NULL AND c.cancel_requested_at IS NULL))`, task)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return child, false, nil
	case err != nil:
		return child, false, fmt.Errorf("read the earlier child run of task %s: %w", task, err)
	}
	return child, true, nil
}

// qAdoptChild names the parent task run $2 (of run $3) and the depth $4
// on the child run $1, once.
const qAdoptChild = `
UPDATE workflow_runs SET parent_task_run_id = $2, parent_run_id = $3, depth = $4
 WHERE id = $1 AND parent_task_run_id IS NULL`

// maxChildDepth is the bound of Options.MaxChildDepth.
func (s *Store) maxChildDepth() int {
	if s.maxDepth > 0 {
		return s.maxDepth
	}
	return MaxChildDepthDefault
}

// heldKindsSQL lists the kinds a pass holds RUNNING without elements.
const heldKindsSQL = `('sleep', 'wait', 'workflow')`

// backoffSQL is the delay, in milliseconds, before attempt t.attempt + 1
// of task run t: full jitter, a uniform draw from 0 up to
// min(max_backoff, initial_backoff * 2^(attempt-1)) (daemon/backoff's
// rule, on the database).
const backoffSQL = `(random() * least(t.max_backoff_ms::float8, t.initial_backoff_ms * power(2, greatest(t.attempt - 1, 0))))`

// qEndHeld ends, as actor $2, the held tasks of the locked runs $1 that
// are due: a sleep whose due time passed (database clock) SUCCEEDED with
// {"due_at", "woke_at"}; a wait whose timeout passed SKIPPED (on_timeout
// skip), RETRYING after its backoff (attempts left) or DEAD; a child run
// that ended: SUCCEEDED with {"run_id", "results"} (its tasks' results by
// name), CANCELLED when the parent's run was cancelled or is a fail_fast
// run with a DEAD task (qStopHeld cancelled the child), else DEAD naming
// the child and its state. A DEAD one buries its PENDING descendants. The
// same statement makes the due RETRYING waits of the live runs $3 wait
// again (rearmWaits). It returns how many it ended and the ids of the
// waits made RUNNING again.
const qEndHeld = `
WITH RECURSIVE cand AS (
    SELECT t.id,
           CASE WHEN t.kind = 'sleep' THEN 'SUCCEEDED'
                WHEN t.kind = 'wait' AND t.on_timeout = 'skip' THEN 'SKIPPED'
                WHEN t.kind = 'wait' AND t.attempt < t.max_attempts THEN 'RETRYING'
                WHEN t.kind = 'wait' THEN 'DEAD'
                WHEN c.state = 'SUCCEEDED' THEN 'SUCCEEDED'
                WHEN c.state = 'CANCELLED' AND (r.cancel_requested_at IS NOT NULL OR (r.fail_fast AND EXISTS (
                    SELECT 1 FROM task_runs d WHERE d.run_id = r.id AND d.state = 'DEAD'))) THEN 'CANCELLED'
                ELSE 'DEAD' END AS to_state,
           CASE WHEN t.kind = 'sleep' THEN jsonb_build_object('due_at', t.due_at, 'woke_at', now())
                WHEN t.kind = 'workflow' AND c.state = 'SUCCEEDED' THEN jsonb_build_object('run_id', c.id, 'results', (
                    SELECT coalesce(jsonb_object_agg(x.task_name, coalesce(x.result, 'null'::jsonb)), '{}'::jsonb)
                      FROM task_runs x WHERE x.run_id = c.id AND x.state = 'SUCCEEDED' AND x.element_of IS NULL)) END AS result,
           CASE WHEN t.kind = 'sleep' THEN 'sleep: due at ' || t.due_at
                WHEN t.kind = 'wait' THEN format('wait_for: no event %s with key %L came within %s', t.wait_event, t.wait_key,
                                                 justify_interval(t.timeout_ms * interval '1 millisecond'))
                ELSE format('workflow: child run %s of %s ended %s', c.id, c.workflow_name, c.state) END AS why
      FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
      LEFT JOIN workflow_runs c ON c.id = t.child_run_id
     WHERE t.run_id = ANY ($1::uuid[]) AND t.state = 'RUNNING' AND t.kind IN ` + heldKindsSQL + `
       AND ((t.kind IN ('sleep', 'wait') AND t.due_at <= now()) OR (t.kind = 'workflow' AND c.finished_at IS NOT NULL))
), moved AS (
    UPDATE task_runs t
       SET state = c.to_state,
           finished_at = CASE WHEN c.to_state = 'RETRYING' THEN NULL ELSE now() END,
           next_attempt_at = CASE WHEN c.to_state = 'RETRYING' THEN now() + ` + backoffSQL + ` * interval '1 millisecond' END,
           result = c.result,
           error = CASE WHEN c.to_state IN ('DEAD', 'RETRYING', 'CANCELLED') THEN c.why END,
           due_at = NULL
      FROM cand c
     WHERE t.id = c.id AND t.state = 'RUNNING'
 RETURNING t.id, t.run_id, t.state, t.attempt, t.fencing_token, c.why
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'RUNNING', state, attempt, fencing_token, $2, why FROM moved
), buried (id, actor) AS (
    SELECT id, $2::text FROM moved WHERE state = 'DEAD'
), ` + buryDownstream + `, ` + rearmWaits + `
SELECT (SELECT count(*) FROM moved) AS ended, (SELECT count(*) FROM moved WHERE state = 'DEAD') AS dead,
       (SELECT coalesce(jsonb_agg(id), '[]') FROM rearmed) AS rearmed`

// rearmWaits is qEndHeld's CTE that makes the RETRYING waits of the
// locked, live runs $3 whose backoff elapsed wait again, as actor $2:
// RUNNING, a new attempt and token, due after their timeout (timeout_ms)
// from now. The rows it touches are RETRYING, qEndHeld's others RUNNING:
// one statement, one round trip per pass. armWaits then matches them
// against the events kept.
const rearmWaits = `rearmed AS (
    UPDATE task_runs t
       SET state = 'RUNNING', attempt = t.attempt + 1, fencing_token = t.fencing_token + 1, started_at = now(),
           next_attempt_at = NULL, due_at = now() + t.timeout_ms * interval '1 millisecond'
     WHERE t.run_id = ANY ($3::uuid[]) AND t.state = 'RETRYING' AND t.kind = 'wait' AND t.next_attempt_at <= now()
 RETURNING t.id, t.run_id, t.attempt, t.fencing_token, t.wait_event, t.wait_key
), rearmed_ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'RETRYING', 'RUNNING', attempt, fencing_token, $2, format('wait_for: waiting again for event %s with key %L', wait_event, wait_key) FROM rearmed
)`

// qStopHeld stops, as actor $2, the held tasks of those of the runs $1
// that were cancelled, or are fail_fast with a DEAD task: a RUNNING sleep
// or wait is CANCELLED; a
// RUNNING child run's cancellation is requested (its own pass cancels
// it, and once it ended qEndHeld ends the parent task). It returns the
// child runs it asked to cancel, which the pass wakes.
const qStopHeld = `
WITH r AS (
    SELECT r.id, CASE WHEN r.cancel_requested_at IS NOT NULL THEN 'its run was cancelled' ELSE 'fail_fast: a task of the run is DEAD' END AS why
      FROM workflow_runs r
     WHERE r.id = ANY ($1::uuid[])
       AND (r.cancel_requested_at IS NOT NULL
            OR (r.fail_fast AND EXISTS (SELECT 1 FROM task_runs d WHERE d.run_id = r.id AND d.state = 'DEAD')))
), s AS (
    UPDATE task_runs t SET state = 'CANCELLED', finished_at = now(), due_at = NULL
      FROM r
     WHERE t.run_id = r.id AND t.state = 'RUNNING' AND t.kind IN ('sleep', 'wait')
 RETURNING t.id, t.run_id, t.attempt, t.fencing_token, r.why
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'RUNNING', 'CANCELLED', attempt, fencing_token, $2, why FROM s
), kids AS (
    UPDATE workflow_runs c SET cancel_requested_at = now(), cancel_reason = 'its parent run ' || t.run_id || ': ' || r.why
      FROM task_runs t JOIN r ON r.id = t.run_id
     WHERE t.state = 'RUNNING' AND t.kind = 'workflow'
       AND c.id = t.child_run_id AND c.finished_at IS NULL AND c.cancel_requested_at IS NULL
 RETURNING c.id
)
SELECT id FROM kids`

// endHeld runs qStopHeld over the runs stop (those cancelled or
// fail_fast), then qEndHeld over every locked run (and the live ones'
// waits again, then armWaits), in tx. It records in res what ended and
// returns the child runs asked to cancel.
func (s *Store) endHeld(ctx context.Context, tx *sqlx.Tx, ids, live, stop []uuid.UUID, actor string, res *AdvanceResult) ([]uuid.UUID, error) {
	var kids []uuid.UUID
	if len(stop) > 0 {
		if err := tx.SelectContext(ctx, &kids, qStopHeld, uuidArray(stop), actor); err != nil {
			return nil, fmt.Errorf("stop held tasks: %w", err)
		}
	}
	var out struct {
		Ended   int        `db:"ended"`
		Dead    int        `db:"dead"`
		Rearmed StringList `db:"rearmed"`
	}
	if err := tx.GetContext(ctx, &out, qEndHeld, uuidArray(ids), actor, uuidArray(live)); err != nil {
		return nil, fmt.Errorf("end held tasks: %w", err)
	}
	res.HeldEnded += out.Ended
	res.HeldDead += out.Dead
	rearmed, err := parseUUIDs(out.Rearmed)
	if err != nil {
		return nil, err
	}
	if err := s.armWaits(ctx, tx, rearmed, actor, res); err != nil {
		return nil, err
	}
	return kids, nil
}

// qLockWaitKeys takes, in a stable order, the transaction-scoped advisory
// lock of the (event, key) of each RUNNING wait $1: the lock of an event
// and its key (qLockEventKey's key, written out the same way).
const qLockWaitKeys = `
SELECT count(pg_advisory_xact_lock(k)) FROM (
    SELECT DISTINCT hashtextextended('flowforge.event:' || t.wait_event || chr(10) || t.wait_key, 0) AS k
      FROM task_runs t WHERE t.id = ANY ($1::uuid[]) AND t.state = 'RUNNING' AND t.kind = 'wait'
     ORDER BY 1) l`

// qLockEventKey takes the transaction-scoped advisory lock of the event
// name $1 and key $2. SendEvent takes it before it inserts an event and
// completes the waits RUNNING, and a pass takes it (qLockWaitKeys) after
// it made waits RUNNING and before it matches them against the events
// kept. Whichever commits second reads what the first committed (each
// reads in a statement after its lock, READ COMMITTED), so an event and a
// wait that start at once always meet: without it, a send reading no
// wait yet and a pass reading no event yet both commit and the wait
// sleeps through its event (TestAnEventSentWhileItsWaitStartsIsDelivered).
const qLockEventKey = `SELECT pg_advisory_xact_lock(hashtextextended('flowforge.event:' || $1::text || chr(10) || $2::text, 0))`

// qMatchKept completes, as actor $2, each RUNNING wait $1 for which an
// event of its name and key is kept (keep_until not passed) and was not
// delivered to it already: SUCCEEDED with the newest such event's payload,
// a delivery row and a history row naming the event.
const qMatchKept = `
WITH m AS (
    SELECT DISTINCT ON (t.id) t.id, e.id AS event_id, e.payload
      FROM task_runs t JOIN events e ON e.name = t.wait_event AND e.key = t.wait_key AND e.keep_until > now()
     WHERE t.id = ANY ($1::uuid[]) AND t.state = 'RUNNING' AND t.kind = 'wait'
       AND NOT EXISTS (SELECT 1 FROM event_deliveries x WHERE x.event_id = e.id AND x.task_run_id = t.id)
     ORDER BY t.id, e.received_at DESC, e.id
), done AS (
    UPDATE task_runs t SET state = 'SUCCEEDED', finished_at = now(), result = m.payload, due_at = NULL, error = NULL
      FROM m WHERE t.id = m.id AND t.state = 'RUNNING'
 RETURNING t.id, t.run_id, t.attempt, t.fencing_token, m.event_id
), del AS (
    INSERT INTO event_deliveries (event_id, task_run_id, run_id)
    SELECT event_id, id, run_id FROM done
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'RUNNING', 'SUCCEEDED', attempt, fencing_token, $2, 'wait_for: event ' || event_id || ' came before the wait started' FROM done
)
SELECT count(*) FROM done`

// armWaits takes the event locks of the waits ids made RUNNING in tx
// (qLockWaitKeys), then completes those whose event is kept (qMatchKept).
// The Store's MidWaitArm hook (Options) runs after the match, before the
// pass commits: a test's way to hold a pass there while an event is sent.
func (s *Store) armWaits(ctx context.Context, tx *sqlx.Tx, ids []uuid.UUID, actor string, res *AdvanceResult) error {
	if len(ids) == 0 {
		return nil
	}
	var n int
	if err := tx.GetContext(ctx, &n, qLockWaitKeys, uuidArray(ids)); err != nil {
		return fmt.Errorf("lock the events waited for: %w", err)
	}
	if err := tx.GetContext(ctx, &n, qMatchKept, uuidArray(ids), actor); err != nil {
		return fmt.Errorf("match waits with the events kept: %w", err)
	}
	res.EventsMatched += n
	if s.midWaitArm != nil {
		s.midWaitArm()
	}
	return nil
}

// heldArgs are qDecide's parameters of held tasks' starts ($6..$11),
// decision by decision (nil where a decision has none).
type heldArgs struct {
	dueMS                         []*int64
	dueAt                         []*time.Time
	waitEvent, waitKey, onTimeout []*string
	child                         []*string
}

// add appends d's.
func (a *heldArgs) add(d decided) {
	a.dueMS = append(a.dueMS, d.dueMS)
	a.dueAt = append(a.dueAt, d.dueAt)
	a.waitEvent = append(a.waitEvent, d.waitEvent)
	a.waitKey = append(a.waitKey, d.waitKey)
	a.onTimeout = append(a.onTimeout, d.onTimeout)
	var child *string
	if d.child != nil {
		c := d.child.String()
		child = &c
	}
	a.child = append(a.child, child)
}

// parseUUIDs parses ids written as text.
func parseUUIDs(ids []string) ([]uuid.UUID, error) {
	out := make([]uuid.UUID, len(ids))
	for i, s := range ids {
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("parse id %q: %w", s, err)
		}
		out[i] = id
	}
	return out, nil
}
