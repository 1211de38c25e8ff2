package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core"
)

// TriggerRequest asks for a new run of a workflow.
type TriggerRequest struct {
	// Workflow is the workflow's name; Version 0 means the newest.
	Workflow string
	Version  int
	// Params is the run's params, a JSON object (nil means {}); checked with
	// core.ValidateParams before anything is written.
	Params json.RawMessage
	// IdempotencyKey, when not empty, de-duplicates triggers: the same key
	// with the same workflow and params returns the existing run; with
	// different ones it is refused with ErrConflict.
	IdempotencyKey string
	// Actor is recorded in the history (OS user or process id).
	Actor string
	// Priority, when not 0, overrides the priority of every task of the
	// run (core.PriorityMin to core.PriorityMax; it orders the waiters of
	// a concurrency key or a rate limit). 0 keeps each task's own.
	Priority int
	// Traceparent, when not empty, is stored on the run (workflow_runs.
	// traceparent): the W3C trace context of the trigger's span, which
	// every dispatch of the run carries (core.Dispatch.Traceparent). Empty:
	// not traced, NULL.
	Traceparent string
}

// triggerPayloadSQL is dispatchPayloadSQL in qTrigger: the traceparent is
// the inserted run's ($40), looked up in its input row.
const triggerPayloadSQL = dispatchPayloadBase + ` || jsonb_strip_nulls(jsonb_build_object('traceparent', (SELECT NULLIF(($40::text[])[i.ord], '') FROM input i WHERE i.id = run_id)))`

// TriggerResult says which run the trigger produced.
type TriggerResult struct {
	RunID uuid.UUID
	// Existing is true when an earlier trigger with the same idempotency key
	// created the run.
	Existing bool
}

// qTrigger creates runs of one workflow version in ONE statement (its own
// transaction: one round trip). Its parameters:
//
//	$1  uuid[]    run ids              $2  bigint  workflow id
//	$3  text      workflow name        $4  int     workflow version
//	$5  jsonb[]   run params           $6  text[]  run idempotency keys (NULL: none)
//	$7  bool      fail_fast            $8  bool    the version was asked for (pinned)
//	$9..$17       the definition's tasks, column by column (taskDefs), once
//	$18 text[]    task idempotency keys, run by run, task by task ("": none;
//	              empty when no task has a key template)
//	$19 int       the definition's number of tasks
//	$20 text      NOTIFY channel (NULL: the caller notifies itself, after
//	              the commit)          $21 text    NOTIFY payload
//	$22 jsonb[]   rendered task params, run by run, task by task (NULL: the
//	              definition's; empty when no task's params hold a template)
//	$23..$27      the language's columns of the definition's tasks (taskDefs:
//	              kind, trigger_rule, on_failure, when_expr ("": none),
//	              ready: a root that is plain, made READY here; one with
//	              a concurrency or rate key ($33, $34) READY waiting for its
//	              admission: flow_wait set, no outbox row)
//	$28 text      TasksChannel (NULL: no wake-up of the schedulers, or the
//	              caller sends it after the commit)
//	$29 text[]    its payloads: the runs asked for, when a task of the
//	              definition the trigger does not make READY has no
//	              upstream (a root with when, on_failure, for_each: the
//	              scheduler's pass decides it), or a root is READY waiting
//	              for its admission (the schedulers' next round admits it)
//	$30..$32      flow control's limits of the definition's tasks (taskDefs:
//	              concurrency.limit, rate_limit.limit, .per in ms; 0: none)
//	$33, $34 text[] the tasks' concurrency and rate-limit keys, run by run,
//	              task by task ("": none; empty when no task has one)
//	$35 text[]    the runs' own concurrency keys, run by run ("": none;
//	              empty when the workflow has none): a run with one is
//	              inserted waiting for its admission (run_wait)
//	$36 int, $37 text the workflow's concurrency limit and strategy (0, "": none)
//	$38 int[]     the runs' priorities, run by run (0: each task's own)
//	$39 int[]     the tasks' priorities (core.TaskDef.PriorityOrDefault)
//	$40 text[]    the runs' traceparents, run by run ("": not traced)
//
// wf is the stale-definition check: a caller may hold a cached definition,
// and unless it asked for that version ($8; versions are immutable, never
// updated or deleted) the statement inserts nothing when a newer version
// has been applied since; the caller then reloads and retries (current is
// false). Runs whose idempotency key is taken are skipped (ON CONFLICT DO
// NOTHING); only the inserted runs get task runs: every inserted run times
// every task of the definition (def, computed once). A run is inserted
// RUNNING, started now, when a root of it is READY, which is what
// core.DeriveRunState makes RUNNING, so no scheduler pass has to write the
// run before its first task finishes (a backlog of runs was rewritten
// PENDING -> RUNNING by the full pass); a run none of whose roots is plain
// (each root has a when, on_failure or for_each: the scheduler decides
// them) is inserted PENDING. Root tasks that are plain
// (core.TaskDef.Plain) are inserted READY with fencing token 1 and their
// outbox rows are written
// from the inserted rows (RETURNING), not re-read from task_runs: no
// scheduler hop before the first dispatch, no index walk. One NOTIFY when a
// run was created. dropped is the pause's gate: when the workflow is paused
// with mode drop, no run is inserted and the pause counts the runs asked
// for (only for a current definition, so a stale retry counts nothing
// twice) whose idempotency key names no run yet (fresh): a retry of a
// trigger that created its run before the pause is not dropped but
// answered with that run, as without a pause; a pause with mode queue lets
// the runs in (their tasks wait).
// Only this statement creates runs, so no trigger path (run trigger, the
// bulk trigger, a schedule tick) passes a drop pause.
const qTrigger = `
WITH wf AS (
  SELECT 1 WHERE $8::bool OR NOT EXISTS (SELECT 1 FROM workflows w WHERE w.name = $3::text AND w.version > $4::int)
), input AS (
  SELECT * FROM unnest($1::uuid[], $5::jsonb[], $6::text[]) WITH ORDINALITY AS r(id, params, ikey, ord)
), fresh AS (
  SELECT count(*) AS n FROM input r
   WHERE r.ikey IS NULL OR NOT EXISTS (SELECT 1 FROM workflow_runs x WHERE x.idempotency_key = r.ikey)
), dropped AS (
  UPDATE workflow_pauses SET dropped = dropped + fresh.n
    FROM fresh
   WHERE workflow_name = $3::text AND mode = 'drop' AND EXISTS (SELECT 1 FROM wf) AND fresh.n > 0
  RETURNING 1
), run AS (
  INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, params, idempotency_key, fail_fast, state, started_at,
                             concurrency_key, concurrency_limit, concurrency_strategy, run_wait, priority, traceparent)
  SELECT r.id, $2::bigint, $3::text, $4::int, r.params, r.ikey, $7::bool,
         CASE WHEN true = ANY ($27::bool[]) THEN 'RUNNING' ELSE 'PENDING' END, CASE WHEN true = ANY ($27::bool[]) THEN now() END,
         NULLIF(($35::text[])[r.ord], ''), NULLIF($36::int, 0), NULLIF($37::text, ''), coalesce(($35::text[])[r.ord], '') <> '',
         NULLIF(($38::int[])[r.ord], 0), NULLIF(($40::text[])[r.ord], '')
    FROM wf, input r
   WHERE NOT EXISTS (SELECT 1 FROM dropped)
  ON CONFLICT (idempotency_key) DO NOTHING
  RETURNING id
), def AS MATERIALIZED (
  SELECT d.ord, d.name, d.handler, d.params, ARRAY(SELECT jsonb_array_elements_text(d.deps)) AS deps,
         d.ready AS root, d.max_attempts, d.initial_ms, d.max_ms, d.timeout_ms, d.ttl_ms,
         d.kind, d.rule, d.on_failure, NULLIF(d.when_expr, '') AS when_expr,
         NULLIF(d.conc_limit, 0) AS conc_limit, NULLIF(d.rate_limit, 0) AS rate_limit, NULLIF(d.rate_per, 0) AS rate_per, d.priority
    FROM unnest($9::text[], $10::text[], $11::jsonb[], $12::jsonb[], $13::int[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[],
                $23::text[], $24::text[], $25::bool[], $26::text[], $27::bool[], $30::int[], $31::int[], $32::bigint[], $39::int[])
         WITH ORDINALITY AS d(name, handler, params, deps, max_attempts, initial_ms, max_ms, timeout_ms, ttl_ms,
                              kind, rule, on_failure, when_expr, ready, conc_limit, rate_limit, rate_per, priority, ord)
), task AS (
  INSERT INTO task_runs (id, run_id, task_name, handler, params, depends_on, state, max_attempts,
                         initial_backoff_ms, max_backoff_ms, timeout_ms, idempotency_key,
                         fencing_token, ready_at, idempotency_ttl_ms, kind, trigger_rule, on_failure, when_expr,
                         concurrency_key, concurrency_limit, rate_key, rate_limit, rate_per_ms, priority, flow_wait)
  SELECT gen_random_uuid(), run.id, d.name, d.handler,
         COALESCE(($22::jsonb[])[(r.ord - 1) * $19::int + d.ord], d.params), d.deps,
         CASE WHEN d.root THEN 'READY' ELSE 'PENDING' END,
         d.max_attempts, d.initial_ms, d.max_ms, d.timeout_ms,
         NULLIF(($18::text[])[(r.ord - 1) * $19::int + d.ord], ''),
         CASE WHEN d.root THEN 1 ELSE 0 END, CASE WHEN d.root THEN now() END, NULLIF(d.ttl_ms, 0),
         d.kind, d.rule, d.on_failure, d.when_expr,
         NULLIF(($33::text[])[(r.ord - 1) * $19::int + d.ord], ''), d.conc_limit,
         NULLIF(($34::text[])[(r.ord - 1) * $19::int + d.ord], ''), d.rate_limit, d.rate_per,
         coalesce(NULLIF(($38::int[])[r.ord], 0), d.priority),
         CASE WHEN NOT d.root THEN NULL
              WHEN coalesce(($33::text[])[(r.ord - 1) * $19::int + d.ord], '') <> '' THEN 'concurrency'
              WHEN coalesce(($34::text[])[(r.ord - 1) * $19::int + d.ord], '') <> '' THEN 'rate' END
    FROM run JOIN input r ON r.id = run.id CROSS JOIN def d
  RETURNING id, run_id, task_name, handler, fencing_token, state, flow_wait
), root AS (
  INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
  SELECT id, fencing_token, ` + triggerPayloadSQL + `
    FROM task WHERE state = 'READY' AND flow_wait IS NULL
)
SELECT EXISTS (SELECT 1 FROM wf) AS current,
       EXISTS (SELECT 1 FROM dropped) AS dropped,
       (SELECT count(*) FROM run) AS created,
       (SELECT count(*) FROM (SELECT pg_notify($20::text, $21::text) FROM run WHERE $20::text IS NOT NULL LIMIT 1) n) AS notified,
       (SELECT count(*) FROM (SELECT pg_notify($28::text, p) FROM unnest($29::text[]) p
                               WHERE $28::text IS NOT NULL AND EXISTS (SELECT 1 FROM run)) w) AS woke`

// Trigger validates the request, then creates the run, its task runs (roots
// READY with their outbox rows) and notifies the publishers in ONE
// statement: one round trip when the Store has the workflow's definition
// cached (see Store.definition), and a second one only when an idempotency
// key is already taken. Errors: core.ErrBadParams for bad params,
// ErrNotFound for an unknown workflow, ErrConflict for an idempotency key
// reused with other params, core.ErrBadParams also when a task's
// idempotency_key template or a template in its params cannot be rendered
// from the params (a missing param; core.RenderRunTasks), ErrWorkflowPaused when the workflow is paused with mode drop
// (nothing created, the drop counted), ErrCommitOutcomeUnknown when the
// statement got no answer (the run may exist).
func (s *Store) Trigger(ctx context.Context, req TriggerRequest) (TriggerResult, error) {
	return s.trigger(ctx, SQLQuerier(s.db), req)
}

// trigger is Trigger on q: the pool (the statement is its own transaction)
// or a transaction whose other writes commit with the run (a schedule's
// tick row, a rerun's mark, a caller's own rows: TriggerTx).
func (s *Store) trigger(ctx context.Context, q Querier, req TriggerRequest) (TriggerResult, error) {
	params, err := triggerParams(req)
	if err != nil {
		return TriggerResult{}, err
	}
	var keys []sql.NullString
	if req.IdempotencyKey != "" {
		keys = []sql.NullString{{String: req.IdempotencyKey, Valid: true}}
	}
	runs := []newRun{{id: uuid.New(), params: params, priority: req.Priority, traceparent: req.Traceparent}}
	created, wf, err := s.insertRuns(ctx, q, req.Workflow, req.Version, runs, keys, 0)
	if err != nil {
		return TriggerResult{}, err
	}
	if created == 1 {
		return TriggerResult{RunID: runs[0].id}, nil
	}
	// The key is taken: the only way a run of a current definition is not
	// inserted.
	return existingRun(ctx, q, req.IdempotencyKey, wf.Name, params)
}

// newRun is one run a trigger is about to insert: its id and its checked
// params.
type newRun struct {
	id       uuid.UUID
	params   json.RawMessage
	priority int // 0: the tasks' own
	// traceparent is the run's trace context ("": not traced).
	traceparent string
}

// staleRetries bounds how often insertRuns reloads a definition that a
// concurrent apply made stale; each retry follows a committed apply.
const staleRetries = 5

// insertRuns inserts runs (with idempotency keys keys, nil for none) of
// version (0: the newest) of workflow with qTrigger on q, reloading the
// definition and retrying when the cached one turned out stale. It returns
// how many runs were inserted (fewer only when a key was taken) and the
// definition used. More than maxTaskRuns task runs (0: no bound) is
// core.ErrBadParams. Errors: those of Trigger.
func (s *Store) insertRuns(ctx context.Context, q Querier, workflow string, version int, runs []newRun, keys []sql.NullString, maxTaskRuns int) (int, Workflow, error) {
	fresh := false
	for range staleRetries {
		wf, err := s.definition(ctx, q, workflow, version, fresh)
		if err != nil {
			return 0, Workflow{}, err
		}
		if n := len(runs) * len(wf.Definition.Tasks); maxTaskRuns > 0 && n > maxTaskRuns {
			return 0, Workflow{}, fmt.Errorf("%w: %d runs of %d tasks are %d task runs in one batch, more than %d", core.ErrBadParams, len(runs), len(wf.Definition.Tasks), n, maxTaskRuns)
		}
		args, err := triggerArgs(wf, version != 0, runs, keys)
		if err != nil {
			return 0, Workflow{}, err
		}
		res, err := s.runTrigger(ctx, q, args)
		if err != nil {
			return 0, Workflow{}, statementError(q, err)
		}
		if res.Dropped {
			return 0, Workflow{}, fmt.Errorf("trigger %q: %w (%d run(s) not created; `ffctl workflow resume %s` ends the pause)", workflow, ErrWorkflowPaused, len(runs), workflow)
		}
		if res.Current {
			return res.Created, wf, nil
		}
		s.defs.forget(workflow)
		fresh = true
	}
	return 0, Workflow{}, fmt.Errorf("trigger %q: new versions keep being applied; retry", workflow)
}

// triggerRow is what qTrigger returns.
type triggerRow struct {
	Current  bool  `db:"current"`
	Dropped  bool  `db:"dropped"`
	Created  int   `db:"created"`
	Notified int64 `db:"notified"`
	Woke     int64 `db:"woke"`
}

// runTrigger runs qTrigger with args on q. On the pool of a daemon's or a
// long-lived program's store it goes out with its cached plan of key
// lookups (KeyPlan), and its notification after its commit, one round trip
// (inOneTripNotifying); in a transaction of the caller's (a schedule's tick, TriggerTx), or
// on a OneShot store (one statement, unprepared), it is sent as it is.
func (s *Store) runTrigger(ctx context.Context, q Querier, args []any) (triggerRow, error) {
	var res triggerRow
	if sq, ok := q.(sqlQuerier); !ok || sq.q != SQLRowQueryer(s.db) || s.oneShot {
		err := q.QueryRow(ctx, qTrigger, s.args(args...)...).Scan(&res.Current, &res.Dropped, &res.Created, &res.Notified, &res.Woke)
		return res, err
	}
	// The statement's own NOTIFYs are off ($20 and $28 NULL): the
	// notifications go out after its commit (inOneTripNotifying says why).
	ns := []notice{{OutboxChannel, ""}} // $20 and $21 (triggerArgs)
	if args[27] != nil {
		for _, p := range args[28].([]string) { // $28 and $29
			ns = append(ns, notice{TasksChannel, p})
		}
	}
	args = slices.Clone(args)
	args[19], args[27] = nil, nil
	err := s.inOneTripNotifying(ctx, tripSettings{KeyPlan: true}, qTrigger, args, func(r pgx.Rows) error {
		var err error
		res, err = pgx.CollectExactlyOneRow(r, pgx.RowToStructByName[triggerRow])
		return err
	}, ns...)
	return res, err
}

// triggerParams checks the request's params (nil means {}) with
// core.ValidateParams, and its idempotency key, and returns the params.
// Errors wrap core.ErrBadParams.
func triggerParams(req TriggerRequest) (json.RawMessage, error) {
	params := req.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	if err := core.ValidateParams(params); err != nil {
		return nil, err
	}
	if err := core.ValidateIdempotencyKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	if req.Priority != 0 {
		if err := core.ValidatePriority(req.Priority); err != nil {
			return nil, fmt.Errorf("%w: %w", core.ErrBadParams, err)
		}
	}
	return params, nil
}

// existingRun returns the run that holds idempotency key ikey, which a
// trigger of workflow with params found taken: the same workflow and params
// are that run (Existing); others are ErrConflict. It is a statement of its
// own, after the trigger's: the run holding the key has committed by then
// (the trigger's ON CONFLICT waited for it).
func existingRun(ctx context.Context, q Querier, ikey, workflow string, params json.RawMessage) (TriggerResult, error) {
	var existing struct {
		ID       uuid.UUID `db:"id"`
		Workflow string    `db:"workflow_name"`
		Same     bool      `db:"same"`
	}
	err := q.QueryRow(ctx, `SELECT id, workflow_name, params = $2::jsonb AS same FROM workflow_runs WHERE idempotency_key = $1::text`, ikey, string(params)).
		Scan(&existing.ID, &existing.Workflow, &existing.Same)
	if errors.Is(err, sql.ErrNoRows) {
		return TriggerResult{}, fmt.Errorf("idempotency key %q: the run holding it vanished; retry", ikey)
	}
	if err != nil {
		return TriggerResult{}, fmt.Errorf("read run by idempotency key: %w", err)
	}
	if existing.Workflow != workflow {
		return TriggerResult{}, fmt.Errorf("%w: idempotency key %q already belongs to run %s of another workflow (%s)", ErrConflict, ikey, existing.ID, existing.Workflow)
	}
	if !existing.Same {
		return TriggerResult{}, fmt.Errorf("%w: idempotency key %q already belongs to run %s (workflow %s) with different params", ErrConflict, ikey, existing.ID, existing.Workflow)
	}
	return TriggerResult{RunID: existing.ID, Existing: true}, nil
}
