package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/expr"
)

// This file holds what the pass does with for_each tasks: it reads what
// their expressions and their elements' templates need (runInputs),
// inserts the elements of a for_each task it decided to run, in the
// transaction of that decision and of their outbox rows (qExpand: a
// scheduler killed inside it leaves none of them or all), and ends a
// for_each task once its elements have ended (qForEachJoin).
//
// An element is a task run of kind "task" named NAME[i] (element_of NAME,
// element_index i, item its element), READY with its outbox row when it is
// made; it copies its for_each task's handler, retry policy, timeout and
// depends_on (its handler gets the same upstream results), and its params
// and idempotency key are rendered with .Item (core.RenderElement). Its
// trigger_rule is all_done: its for_each task decided it runs, so a
// requeued element is made READY again whatever the upstream tasks ended
// as, and no DEAD upstream task buries it.

// element is one task run of a for_each task to insert.
type element struct {
	index  int
	item   json.RawMessage
	params *string // rendered; nil: the for_each task's own
	key    string  // stored idempotency key; "": none
}

// qExpand inserts the elements $1..$5 (the for_each task, index, item,
// rendered params or NULL, key or ”) of for_each tasks this transaction
// made RUNNING, READY with token 1 and their outbox rows. A name taken
// twice fails the statement (the unique (run_id, task_name)): a task is
// expanded once, and a requeued one is reopened (qReopenElements).
const qExpand = `
WITH e AS (
    SELECT * FROM unnest($1::uuid[], $2::int[], $3::jsonb[], $4::jsonb[], $5::text[]) AS e(parent, idx, item, params, ikey)
), ins AS (
    INSERT INTO task_runs (id, run_id, task_name, handler, params, depends_on, state, max_attempts,
                           initial_backoff_ms, max_backoff_ms, timeout_ms, idempotency_key,
                           fencing_token, ready_at, idempotency_ttl_ms, kind, trigger_rule, element_of, element_index, item,
                           concurrency_key, concurrency_limit, rate_key, rate_limit, rate_per_ms, flow_wait, priority)
    SELECT gen_random_uuid(), p.run_id, p.task_name || '[' || e.idx || ']', p.handler, coalesce(e.params, p.params), p.depends_on,
           'READY', p.max_attempts, p.initial_backoff_ms, p.max_backoff_ms, p.timeout_ms, NULLIF(e.ikey, ''),
           1, now(), p.idempotency_ttl_ms, 'task', 'all_done', p.task_name, e.idx, e.item,
           p.concurrency_key, p.concurrency_limit, p.rate_key, p.rate_limit, p.rate_per_ms, ` + flowWaitP + `, p.priority
      FROM e JOIN task_runs p ON p.id = e.parent
     WHERE p.state = 'RUNNING' AND p.kind = 'for_each'
 RETURNING id, run_id, task_name, handler, fencing_token, flow_wait
), ob AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
    SELECT id, fencing_token, ` + dispatchPayloadSQL + ` FROM ins WHERE flow_wait IS NULL
)
SELECT count(*) FROM ins`

// qReopenElements makes PENDING again (a fresh budget, audited as actor
// $2) the elements that did not succeed of the requeued for_each tasks $1
// this transaction made RUNNING again; the next round of decisions makes
// them READY.
const qReopenElements = `
WITH cand AS (
    SELECT t.id, t.state FROM task_runs p JOIN task_runs t ON t.run_id = p.run_id AND t.element_of = p.task_name
     WHERE p.id = ANY ($1::uuid[]) AND p.state = 'RUNNING' AND t.state IN ('DEAD', 'CANCELLED', 'UPSTREAM_FAILED')
), c AS (
    UPDATE task_runs t SET ` + setRequeued + `
      FROM cand WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, t.fencing_token, cand.state AS from_state
), c_logs AS (` + shiftLogsOfC + `
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, from_state, 'PENDING', 0, fencing_token, $2, 'its for_each task was requeued' FROM c
)
SELECT count(*) FROM c`

// qForEachJoin ends the RUNNING for_each tasks of the locked runs $1 whose
// elements have all ended, as actor $2: SUCCEEDED with the list of the
// elements' results in element order when every element SUCCEEDED; else
// DEAD, naming the first DEAD element and its error, when one is DEAD (its
// PENDING descendants are buried with it, buryDownstream); else CANCELLED
// (its elements were cancelled: the run was cancelled, or fail_fast).
const qForEachJoin = `
WITH RECURSIVE par AS (
    SELECT p.id, count(*) AS n,
           count(*) FILTER (WHERE e.state = 'SUCCEEDED') AS ok,
           count(*) FILTER (WHERE e.state IN ('DEAD', 'UPSTREAM_FAILED')) AS dead,
           count(*) FILTER (WHERE e.state IN ('SUCCEEDED', 'DEAD', 'UPSTREAM_FAILED', 'CANCELLED', 'SKIPPED')) AS ended
      FROM task_runs p JOIN task_runs e ON e.run_id = p.run_id AND e.element_of = p.task_name
     WHERE p.run_id = ANY ($1::uuid[]) AND p.state = 'RUNNING' AND p.kind = 'for_each'
     GROUP BY p.id
), done AS (
    SELECT id, CASE WHEN ok = n THEN 'SUCCEEDED' WHEN dead > 0 THEN 'DEAD' ELSE 'CANCELLED' END AS to_state
      FROM par WHERE ended = n
), fin AS (
    UPDATE task_runs t
       SET state = d.to_state, finished_at = now(),
           result = CASE WHEN d.to_state = 'SUCCEEDED' THEN (
               SELECT jsonb_agg(coalesce(e.result, 'null'::jsonb) ORDER BY e.element_index)
                 FROM task_runs e WHERE e.run_id = t.run_id AND e.element_of = t.task_name) END,
           error = CASE WHEN d.to_state = 'DEAD' THEN (
               SELECT 'element ' || e.task_name || ' is ' || e.state || coalesce(': ' || e.error, '')
                 FROM task_runs e WHERE e.run_id = t.run_id AND e.element_of = t.task_name AND e.state IN ('DEAD', 'UPSTREAM_FAILED')
                ORDER BY e.element_index LIMIT 1) END
      FROM done d
     WHERE t.id = d.id AND t.state = 'RUNNING'
 RETURNING t.id, t.run_id, t.state, t.attempt, t.fencing_token, t.error
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'RUNNING', state, attempt, fencing_token, $2,
           coalesce(error, CASE state WHEN 'SUCCEEDED' THEN 'for_each: every element succeeded' ELSE 'for_each: its elements were cancelled' END)
      FROM fin
), buried (id, actor) AS (
    SELECT id, $2::text FROM fin WHERE state = 'DEAD'
), ` + buryDownstream + `
SELECT count(*) FROM fin`

// joinForEach ends the for_each tasks of the locked runs whose elements
// have all ended (qForEachJoin), before the pass decides and promotes
// what depends on them.
func joinForEach(ctx context.Context, tx *sqlx.Tx, ids []uuid.UUID, actor string, res *AdvanceResult) error {
	if err := tx.GetContext(ctx, &res.ForEachEnded, qForEachJoin, uuidArray(ids), actor); err != nil {
		return fmt.Errorf("end for_each tasks: %w", err)
	}
	return nil
}

// writeDecisions writes the decisions ds (qDecide), then inserts the
// elements of the for_each tasks it made RUNNING (qExpand) and reopens
// those of the requeued ones (qReopenElements), all in tx. It records the
// counts in res and returns how many tasks it ended or reopened (tasks
// the next round of decisions may find decidable).
func (s *Store) writeDecisions(ctx context.Context, tx *sqlx.Tx, ds []decided, actor string, res *AdvanceResult) (int, error) {
	ids, to, errs, reasons := make([]uuid.UUID, len(ds)), make([]string, len(ds)), make([]*string, len(ds)), make([]string, len(ds))
	var h heldArgs
	var els elementArgs
	var reopen []uuid.UUID
	for i, d := range ds {
		ids[i], to[i], reasons[i] = d.id, string(d.to), d.reason
		if d.err != "" {
			errs[i] = &ds[i].err
		}
		if d.reopen {
			reopen = append(reopen, d.id)
		}
		els.add(d.id, d.elements)
		h.add(d)
	}
	var n struct {
		Ready   int        `db:"ready"`
		Skipped int        `db:"skipped"`
		Ended   int        `db:"ended"`
		Waits   StringList `db:"waits"`
	}
	if err := tx.GetContext(ctx, &n, qDecide, uuidArray(ids), to, errs, reasons, actor,
		h.dueMS, h.dueAt, h.waitEvent, h.waitKey, h.onTimeout, h.child); err != nil {
		return 0, fmt.Errorf("decide tasks: %w", err)
	}
	res.Promoted += n.Ready
	res.Skipped += n.Skipped
	waits, err := parseUUIDs(n.Waits)
	if err != nil {
		return 0, err
	}
	matched := res.EventsMatched
	if err := s.armWaits(ctx, tx, waits, actor, res); err != nil {
		return 0, err
	}
	reopened, err := s.expandForEach(ctx, tx, els, reopen, actor, res)
	return n.Ended + reopened + res.EventsMatched - matched, err
}

// elementArgs are qExpand's parameters, element by element.
type elementArgs struct {
	parents []uuid.UUID
	indexes []int
	items   []string
	params  []*string
	keys    []string
}

// add appends the elements of for_each task parent.
func (a *elementArgs) add(parent uuid.UUID, els []element) {
	for _, e := range els {
		a.parents = append(a.parents, parent)
		a.indexes = append(a.indexes, e.index)
		a.items = append(a.items, string(e.item))
		a.params = append(a.params, e.params)
		a.keys = append(a.keys, e.key)
	}
}

// expandForEach inserts the elements els (qExpand) and reopens the
// elements of the requeued for_each tasks reopen (qReopenElements), in tx,
// and returns how many elements it reopened. Once elements are inserted it
// calls the Store's MidExpansion hook (Options), inside the transaction.
func (s *Store) expandForEach(ctx context.Context, tx *sqlx.Tx, els elementArgs, reopen []uuid.UUID, actor string, res *AdvanceResult) (int, error) {
	if len(els.parents) > 0 {
		var n int
		if err := tx.GetContext(ctx, &n, qExpand, uuidArray(els.parents), els.indexes, els.items, els.params, els.keys); err != nil {
			return 0, fmt.Errorf("expand for_each tasks: %w", err)
		}
		res.Expanded += n
		if s.midExpansion != nil {
			s.midExpansion()
		}
	}
	if len(reopen) == 0 {
		return 0, nil
	}
	var n int
	if err := tx.GetContext(ctx, &n, qReopenElements, uuidArray(reopen), actor); err != nil {
		return 0, fmt.Errorf("reopen for_each elements: %w", err)
	}
	return n, nil
}

// runInputs reads, at most once per run in one round of decisions, what
// the expressions of a run's tasks and its elements' templates need.
type runInputs struct {
	tx   *sqlx.Tx
	runs map[uuid.UUID]*runInput
}

// runInput is one run's: its workflow's definition and its params, and
// the results of its tasks that SUCCEEDED (elements aside), by name.
type runInput struct {
	workflow string
	params   json.RawMessage
	depth    int // 0 for a run no task started, its child's 1, ...
	tasks    map[string]core.TaskDef
	deps     map[string][]string
	results  map[string]json.RawMessage
}

func newRunInputs(tx *sqlx.Tx) *runInputs {
	return &runInputs{tx: tx, runs: map[uuid.UUID]*runInput{}}
}

// qRunInput reads a run's workflow, params, depth and definition.
const qRunInput = `
SELECT r.workflow_name, r.params, r.depth, w.definition
  FROM workflow_runs r JOIN workflows w ON w.id = r.workflow_id
 WHERE r.id = $1`

// qRunResults reads the results of a run's tasks that SUCCEEDED, elements
// aside (a for_each task's result holds theirs).
const qRunResults = `
SELECT task_name, coalesce(result, 'null'::jsonb) AS result
  FROM task_runs WHERE run_id = $1 AND state = 'SUCCEEDED' AND element_of IS NULL`

// load returns run's inputs, reading them the first time.
func (in *runInputs) load(ctx context.Context, run uuid.UUID) (*runInput, error) {
	if ri, ok := in.runs[run]; ok {
		return ri, nil
	}
	var row struct {
		Workflow string `db:"workflow_name"`
		Params   []byte `db:"params"`
		Depth    int    `db:"depth"`
		Def      []byte `db:"definition"`
	}
	if err := in.tx.GetContext(ctx, &row, qRunInput, run); err != nil {
		return nil, fmt.Errorf("read run %s's definition: %w", run, err)
	}
	var def core.Definition
	if err := json.Unmarshal(row.Def, &def); err != nil {
		return nil, fmt.Errorf("decode run %s's definition: %w", run, err)
	}
	ri := &runInput{workflow: row.Workflow, params: row.Params, depth: row.Depth, tasks: map[string]core.TaskDef{}, deps: def.Deps(), results: map[string]json.RawMessage{}}
	for _, t := range def.Tasks {
		ri.tasks[t.Name] = t
	}
	var rows []struct {
		Name   string `db:"task_name"`
		Result []byte `db:"result"`
	}
	if err := in.tx.SelectContext(ctx, &rows, qRunResults, run); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read run %s's results: %w", run, err)
	}
	for _, r := range rows {
		ri.results[r.Name] = r.Result
	}
	in.runs[run] = ri
	return ri, nil
}

// input is what task's expressions see in ri: the run's params and the
// results of its ancestors (null for one that did not succeed).
func (ri *runInput) input(task string) (expr.Input, []string) {
	up := core.Ancestors(ri.deps, task)
	m := make(map[string]json.RawMessage, len(up))
	for _, name := range up {
		m[name] = ri.results[name]
	}
	return expr.Input{Params: ri.params, Upstream: m}, up
}

// exprOutcome is an expression's value, or the error (naming it) that
// fails its task.
type exprOutcome struct {
	value bool
	err   string
}

// when evaluates c's when. The error is the database's.
func (in *runInputs) when(ctx context.Context, c candidate) (exprOutcome, error) {
	ri, err := in.load(ctx, c.RunID)
	if err != nil {
		return exprOutcome{}, err
	}
	input, up := ri.input(c.Name)
	prg, err := expr.Compile(c.When, expr.Bool, up)
	if err != nil {
		return exprOutcome{err: "when: " + err.Error()}, nil
	}
	ok, err := prg.Bool(ctx, input)
	if err != nil {
		return exprOutcome{err: "when: " + err.Error()}, nil
	}
	return exprOutcome{value: ok}, nil
}

// expansion evaluates the for_each of c, which runs (d), and returns d
// with its elements: DEAD when the expression fails, when the list is
// longer than max_items or an element's templates cannot render;
// SUCCEEDED (result []) for an empty list. The error is the database's.
func (in *runInputs) expansion(ctx context.Context, c candidate, d decided) (decided, error) {
	ri, err := in.load(ctx, c.RunID)
	if err != nil {
		return decided{}, err
	}
	t, ok := ri.tasks[c.Name]
	if !ok || t.ForEach == "" {
		return dead(d, "for_each: the task's definition has no for_each"), nil
	}
	input, up := ri.input(c.Name)
	prg, err := expr.Compile(t.ForEach, expr.List, up)
	if err != nil {
		return dead(d, "for_each: "+err.Error()), nil
	}
	items, err := prg.List(ctx, input)
	if err != nil {
		return dead(d, "for_each: "+err.Error()), nil
	}
	if max := t.MaxItemsOrDefault(); len(items) > max {
		return dead(d, fmt.Sprintf("for_each: %s gave %d elements, more than max_items %d", t.ForEach, len(items), max)), nil
	}
	if len(items) == 0 {
		d.to, d.reason = core.TaskSucceeded, "for_each: the list is empty"
		return d, nil
	}
	d.elements = make([]element, len(items))
	for i, it := range items {
		p, key, err := core.RenderElement(ri.workflow, t, ri.params, it)
		if err != nil {
			return dead(d, fmt.Sprintf("for_each: element %d: %v", i, err)), nil
		}
		e := element{index: i, item: it, key: key}
		if p != nil {
			s := string(p)
			e.params = &s
		}
		d.elements[i] = e
	}
	d.reason = fmt.Sprintf("for_each: %d elements", len(items))
	return d, nil
}
