package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// This file holds the scheduler pass's decision over the PENDING tasks
// that are not plain (core.TaskDef.Plain: when, a trigger rule other than
// all_success, on_failure, for_each) and over the plain ones an upstream
// task ended without succeeding (a SKIPPED upstream): which of them run,
// are SKIPPED, UPSTREAM_FAILED or DEAD, and which for_each tasks expand
// (foreach.go). It runs under the runs' locks, after the finishes that
// woke it committed, like the promotion; qPromote promotes only plain
// tasks whose upstream tasks all SUCCEEDED, and a finish's counter join
// only plain children (joinComplete).

// plainTaskSQL is true for a task run t that is plain: a "task" run,
// all_success, without when, not on_failure (core.TaskDef.Plain). Only a
// plain task is promoted by qPromote and by a finish (plainChildSQL, the
// same test of a child c); TestPlainIsOneTestInSQLAndGo holds the two
// spellings and core's together.
const (
	plainTaskSQL  = `(t.kind = 'task' AND t.trigger_rule = 'all_success' AND NOT t.on_failure AND t.when_expr IS NULL)`
	plainChildSQL = `(c.kind = 'task' AND c.trigger_rule = 'all_success' AND NOT c.on_failure AND c.when_expr IS NULL)`
)

// endedSQL lists the states in which an upstream task has ended for a
// trigger rule (core.TriggerRule.Decide): every terminal state but
// CANCELLED, which leaves its downstream tasks waiting.
const endedSQL = `('SUCCEEDED', 'SKIPPED', 'DEAD', 'UPSTREAM_FAILED')`

// decidableSQL is true for a PENDING task run t that a pass decides or
// promotes now: an on_failure task (decided on every pass until it runs or
// is skipped), or one whose upstream tasks have all ended. qRunCounts
// counts such a task as eligible, so a run never settles while one is left
// (a finish may commit between the decision and the count).
const decidableSQL = `(t.on_failure OR NOT EXISTS (
           SELECT 1 FROM task_runs p
            WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on) AND p.state NOT IN ` + endedSQL + `))`

// qDecideCandidates reads the PENDING tasks of the locked, uncancelled runs
// $1 that are decidable and not qPromote's (a plain task whose upstream
// tasks all SUCCEEDED), with what a decision needs: the states of their
// upstream tasks, whether their run is failing (a task is DEAD) and whether
// its other tasks have all ended (for on_failure), and whether a for_each
// task has elements already (a requeued one: its elements are reopened,
// not made again).
const qDecideCandidates = `
SELECT t.id, t.run_id, t.task_name, t.kind, t.fencing_token, t.trigger_rule, t.on_failure, coalesce(t.when_expr, '') AS when_expr,
       (SELECT coalesce(jsonb_agg(p.state), '[]') FROM task_runs p
         WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on)) AS upstream_states,
       EXISTS (SELECT 1 FROM task_runs d WHERE d.run_id = t.run_id AND d.state = 'DEAD') AS run_failing,
       NOT EXISTS (SELECT 1 FROM task_runs o WHERE o.run_id = t.run_id AND NOT o.on_failure
                      AND o.state NOT IN ('SUCCEEDED', 'SKIPPED', 'DEAD', 'UPSTREAM_FAILED', 'CANCELLED')) AS others_ended,
       EXISTS (SELECT 1 FROM task_runs e WHERE e.run_id = t.run_id AND e.element_of = t.task_name) AS expanded
  FROM task_runs t
 WHERE t.run_id = ANY ($1::uuid[]) AND t.state = 'PENDING' AND ` + decidableSQL + `
   AND NOT (` + plainTaskSQL + ` AND NOT EXISTS (
           SELECT 1 FROM task_runs p WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on) AND p.state <> 'SUCCEEDED'))
 ORDER BY t.run_id, t.task_name`

// candidate is a row of qDecideCandidates.
type candidate struct {
	ID             uuid.UUID     `db:"id"`
	RunID          uuid.UUID     `db:"run_id"`
	Name           string        `db:"task_name"`
	Kind           core.TaskKind `db:"kind"`
	Token          int64         `db:"fencing_token"`
	Rule           string        `db:"trigger_rule"`
	OnFailure      bool          `db:"on_failure"`
	When           string        `db:"when_expr"`
	UpstreamStates StringList    `db:"upstream_states"`
	RunFailing     bool          `db:"run_failing"`
	OthersEnded    bool          `db:"others_ended"`
	Expanded       bool          `db:"expanded"`
}

// decision is its rule's answer for a candidate.
func (c candidate) decision() core.Decision {
	if c.OnFailure {
		return core.DecideOnFailure(c.RunFailing, c.OthersEnded)
	}
	var u core.UpstreamCounts
	for _, s := range c.UpstreamStates {
		u.CountUpstream(core.TaskState(s))
	}
	return core.TriggerRule(c.Rule).Decide(u)
}

// qDecide writes the pass's decisions over PENDING tasks, each guarded by
// state: $1 the tasks, $2 the state each goes to (READY, SKIPPED,
// UPSTREAM_FAILED, DEAD, RUNNING: a for_each task expanded or a held task
// started, SUCCEEDED: a for_each over an empty list, whose result is []),
// $3 its error (NULL for none), $4 the history's reason, $5 the actor; a
// held task's start: $6 its due time as milliseconds from now (database
// clock: a sleep's for, a wait's timeout, also kept as its timeout_ms for
// a wait that waits again), $7 as a timestamp (a sleep's until), $8 and
// $9 a wait's event and key, $10 its on_timeout, $11 a child run's id. A
// task made READY gets its token bump and its outbox row in this
// statement, as in qPromote; a held task made RUNNING its attempt and
// token bump (a child run's idempotency key is derived from that token:
// childKey); a task made DEAD takes its PENDING descendants to
// UPSTREAM_FAILED here too (buryDownstream).
const qDecide = `
WITH RECURSIVE d AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $6::bigint[], $7::timestamptz[],
                         $8::text[], $9::text[], $10::text[], $11::text[])
           AS d(id, to_state, error, reason, due_ms, due_at, wait_event, wait_key, on_timeout, child)
), moved AS (
    UPDATE task_runs t
       SET state = d.to_state,
           fencing_token = CASE WHEN d.to_state = 'READY' OR (d.to_state = 'RUNNING' AND t.kind IN ` + heldKindsSQL + `)
                                THEN t.fencing_token + 1 ELSE t.fencing_token END,
           attempt = CASE WHEN d.to_state = 'RUNNING' AND t.kind IN ` + heldKindsSQL + ` THEN t.attempt + 1 ELSE t.attempt END,
           due_at = CASE WHEN d.to_state = 'RUNNING' THEN coalesce(d.due_at, now() + d.due_ms * interval '1 millisecond') END,
           timeout_ms = CASE WHEN d.to_state = 'RUNNING' AND t.kind = 'wait' THEN d.due_ms ELSE t.timeout_ms END,
           wait_event = CASE WHEN d.to_state = 'RUNNING' THEN d.wait_event ELSE t.wait_event END,
           wait_key = CASE WHEN d.to_state = 'RUNNING' THEN d.wait_key ELSE t.wait_key END,
           on_timeout = CASE WHEN d.to_state = 'RUNNING' THEN d.on_timeout ELSE t.on_timeout END,
           child_run_id = CASE WHEN d.to_state = 'RUNNING' THEN d.child::uuid ELSE t.child_run_id END,
           ready_at = CASE WHEN d.to_state = 'READY' THEN now() ELSE t.ready_at END,
           started_at = CASE WHEN d.to_state = 'RUNNING' THEN now() ELSE t.started_at END,
           finished_at = CASE WHEN d.to_state IN ('READY', 'RUNNING') THEN NULL ELSE now() END,
           result = CASE WHEN d.to_state = 'SUCCEEDED' THEN '[]'::jsonb END,
           error = d.error,
           flow_wait = CASE WHEN d.to_state = 'READY' THEN ` + flowWaitT + ` END
      FROM d
     WHERE t.id = d.id AND t.state = 'PENDING'
 RETURNING t.id, t.run_id, t.task_name, t.handler, t.fencing_token, t.attempt, t.state, d.reason, t.wait_event, t.flow_wait
), ob AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
    SELECT id, fencing_token, ` + dispatchPayloadSQL + `
      FROM moved WHERE state = 'READY' AND flow_wait IS NULL
    ON CONFLICT (task_run_id, fencing_token_snapshot, dispatch) DO NOTHING
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'PENDING', state, attempt, fencing_token, $5, reason FROM moved
), buried (id, actor) AS (
    SELECT id, $5::text FROM moved WHERE state = 'DEAD'
), ` + buryDownstream + `
SELECT count(*) FILTER (WHERE state = 'READY') AS ready,
       count(*) FILTER (WHERE state = 'SKIPPED') AS skipped,
       count(*) FILTER (WHERE state <> 'READY') AS ended,
       coalesce(jsonb_agg(id) FILTER (WHERE state = 'RUNNING' AND wait_event IS NOT NULL), '[]') AS waits
  FROM moved`

// decided is what a pass decided over one task.
type decided struct {
	id          uuid.UUID
	to          core.TaskState
	err, reason string
	parent      candidate // the task decided
	// elements are a for_each's task runs to insert (to RUNNING).
	elements []element
	// reopen: a requeued for_each, whose elements that did not succeed are
	// made PENDING again (to RUNNING).
	reopen bool
	// A held task's start (to RUNNING; held.go): its due time in
	// milliseconds from now or as a timestamp, a wait's event, key and
	// on_timeout, a child run's id. Nil for none.
	dueMS                         *int64
	dueAt                         *time.Time
	waitEvent, waitKey, onTimeout *string
	child                         *uuid.UUID
}

// maxDecideRounds bounds how often one pass decides again after a
// decision ended tasks (a SKIPPED or UPSTREAM_FAILED task lets the tasks
// below it be decided in the same pass): a chain of the workflow's
// length at most.
const maxDecideRounds = core.MaxTasks + 1

// decideTasks decides the candidates of the live runs (qDecideCandidates)
// and writes the decisions (qDecide, then the expansions of the for_each
// tasks that run: expandForEach), again while a round ended tasks. It
// records in res what it did.
func (s *Store) decideTasks(ctx context.Context, tx *sqlx.Tx, live []uuid.UUID, actor string, res *AdvanceResult) error {
	if len(live) == 0 {
		return nil
	}
	for range maxDecideRounds {
		var cands []candidate
		if err := tx.SelectContext(ctx, &cands, qDecideCandidates, uuidArray(live)); err != nil {
			return fmt.Errorf("read tasks to decide: %w", err)
		}
		// Read afresh each round: a round's decisions add results (a
		// for_each over an empty list SUCCEEDED with []).
		ds, err := s.decideAll(ctx, newRunInputs(tx), cands)
		if err != nil || len(ds) == 0 {
			return err
		}
		ended, err := s.writeDecisions(ctx, tx, ds, actor, res)
		if err != nil || ended == 0 {
			return err
		}
	}
	return nil
}

// decideAll decides each candidate: its rule, then its when, then, for a
// for_each that runs, its list. A candidate that waits is left out.
func (s *Store) decideAll(ctx context.Context, in *runInputs, cands []candidate) ([]decided, error) {
	var out []decided
	for _, c := range cands {
		d := decided{id: c.ID, parent: c}
		switch c.decision() {
		case core.DecideWait:
			continue
		case core.DecideSkip:
			d.to, d.reason = core.TaskSkipped, skipReason(c)
		case core.DecideUpstreamFailed:
			d.to = core.TaskUpstreamFailed
			d.err = fmt.Sprintf("trigger_rule %s: an upstream task is DEAD or UPSTREAM_FAILED", c.Rule)
			d.reason = d.err
		case core.DecideRun:
			var err error
			if d, err = s.runDecision(ctx, in, c); err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// skipReason says why c is SKIPPED.
func skipReason(c candidate) string {
	if c.OnFailure {
		return "on_failure: the run did not fail"
	}
	return fmt.Sprintf("trigger_rule %s: an upstream task was SKIPPED", c.Rule)
}

// runDecision decides a candidate its rule lets run: SKIPPED when its when
// is false, DEAD when an expression fails (the error names it), READY for
// a task, for a for_each RUNNING with its elements (SUCCEEDED over an
// empty list; a reopen when it has elements already), and for a sleep, a
// wait or a child run RUNNING as heldDecision starts it. The error is the
// database's, reading what the expressions need.
func (s *Store) runDecision(ctx context.Context, in *runInputs, c candidate) (decided, error) {
	d := decided{id: c.ID, parent: c, to: core.TaskReady, reason: "dependencies succeeded"}
	if c.OnFailure {
		d.reason = "on_failure: the run is failing"
	}
	if c.When != "" {
		ok, err := in.when(ctx, c)
		if err != nil {
			return decided{}, err
		}
		switch {
		case ok.err != "":
			return dead(d, ok.err), nil
		case !ok.value:
			d.to, d.reason = core.TaskSkipped, "when is false: "+c.When
			return d, nil
		}
	}
	if c.Kind.Held() && c.Kind != core.KindForEach {
		return s.heldDecision(ctx, in, c, d)
	}
	if c.Kind != core.KindForEach {
		return d, nil
	}
	d.to = core.TaskRunning
	if c.Expanded {
		d.reopen, d.reason = true, "for_each: requeued; its elements that did not succeed run again"
		return d, nil
	}
	return in.expansion(ctx, c, d)
}

// dead is d made DEAD with err as its error and reason.
func dead(d decided, err string) decided {
	d.to, d.err, d.reason, d.elements = core.TaskDead, err, err, nil
	return d
}
