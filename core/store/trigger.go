package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

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
}

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
//	$9..$20       the task runs, column by column (taskRows), $9 their run ids
//	$21 text      NOTIFY channel       $22 text    NOTIFY payload
//
// wf is the stale-definition check: a caller may hold a cached definition,
// and unless it asked for that version ($8; versions are immutable, never
// updated or deleted) the statement inserts nothing when a newer version
// has been applied since; the caller then reloads and retries (current is
// false). Runs whose idempotency key is taken are skipped (ON CONFLICT DO
// NOTHING); only the inserted runs get task runs. Root tasks are inserted
// READY with fencing token 1 and their outbox rows are written from the
// inserted rows (RETURNING), not re-read from task_runs: no scheduler hop
// before the first dispatch, no index walk. One NOTIFY when a run was
// created.
const qTrigger = `
WITH wf AS (
  SELECT 1 WHERE $8::bool OR NOT EXISTS (SELECT 1 FROM workflows w WHERE w.name = $3::text AND w.version > $4::int)
), run AS (
  INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, params, idempotency_key, fail_fast)
  SELECT r.id, $2::bigint, $3::text, $4::int, r.params, r.ikey, $7::bool
    FROM wf, unnest($1::uuid[], $5::jsonb[], $6::text[]) AS r(id, params, ikey)
  ON CONFLICT (idempotency_key) DO NOTHING
  RETURNING id
), task AS (
  INSERT INTO task_runs (id, run_id, task_name, handler, params, depends_on, state, max_attempts,
                         initial_backoff_ms, max_backoff_ms, timeout_ms, idempotency_key,
                         fencing_token, ready_at, idempotency_ttl_ms)
  SELECT u.id, u.run_id, u.name, u.handler, u.params, ARRAY(SELECT jsonb_array_elements_text(u.deps)),
         CASE WHEN jsonb_array_length(u.deps) = 0 THEN 'READY' ELSE 'PENDING' END,
         u.max_attempts, u.initial_ms, u.max_ms, u.timeout_ms, NULLIF(u.ikey, ''),
         CASE WHEN jsonb_array_length(u.deps) = 0 THEN 1 ELSE 0 END,
         CASE WHEN jsonb_array_length(u.deps) = 0 THEN now() END, NULLIF(u.ttl_ms, 0)
    FROM unnest($9::uuid[], $10::uuid[], $11::text[], $12::text[], $13::jsonb[], $14::jsonb[], $15::int[],
                $16::bigint[], $17::bigint[], $18::bigint[], $19::text[], $20::bigint[])
         AS u(run_id, id, name, handler, params, deps, max_attempts, initial_ms, max_ms, timeout_ms, ikey, ttl_ms)
    JOIN run ON run.id = u.run_id
  RETURNING id, run_id, task_name, handler, fencing_token, state
), root AS (
  INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
  SELECT id, fencing_token, ` + dispatchPayloadSQL + `
    FROM task WHERE state = 'READY'
)
SELECT EXISTS (SELECT 1 FROM wf) AS current,
       (SELECT count(*) FROM run) AS created,
       (SELECT count(*) FROM (SELECT pg_notify($21::text, $22::text) FROM run LIMIT 1) n) AS notified`

// Trigger validates the request, then creates the run, its task runs (roots
// READY with their outbox rows) and notifies the publishers in ONE
// statement: one round trip when the Store has the workflow's definition
// cached (see Store.definition), and a second one only when an idempotency
// key is already taken. Errors: core.ErrBadParams for bad params,
// ErrNotFound for an unknown workflow, ErrConflict for an idempotency key
// reused with other params, core.ErrBadParams also when a task's
// idempotency_key template cannot be rendered from the params (a missing
// param), ErrCommitOutcomeUnknown when the statement got no answer (the
// run may exist).
func (s *Store) Trigger(ctx context.Context, req TriggerRequest) (TriggerResult, error) {
	params, pmap, err := triggerParams(req)
	if err != nil {
		return TriggerResult{}, err
	}
	var keys []sql.NullString
	if req.IdempotencyKey != "" {
		keys = []sql.NullString{{String: req.IdempotencyKey, Valid: true}}
	}
	runs := []newRun{{id: uuid.New(), params: params, pmap: pmap}}
	created, wf, err := s.insertRuns(ctx, req.Workflow, req.Version, runs, keys)
	if err != nil {
		return TriggerResult{}, err
	}
	if created == 1 {
		return TriggerResult{RunID: runs[0].id}, nil
	}
	// The key is taken: the only way a run of a current definition is not
	// inserted.
	return existingRun(ctx, s.db, req.IdempotencyKey, wf.Name, params)
}

// newRun is one run a trigger is about to insert: its id and its checked
// params, raw and decoded.
type newRun struct {
	id     uuid.UUID
	params json.RawMessage
	pmap   map[string]any
}

// staleRetries bounds how often insertRuns reloads a definition that a
// concurrent apply made stale; each retry follows a committed apply.
const staleRetries = 5

// insertRuns inserts runs (with idempotency keys keys, nil for none) of
// version (0: the newest) of workflow with qTrigger, reloading the
// definition and retrying when the cached one turned out stale. It returns
// how many runs were inserted (fewer only when a key was taken) and the
// definition used. Errors: those of Trigger.
func (s *Store) insertRuns(ctx context.Context, workflow string, version int, runs []newRun, keys []sql.NullString) (int, Workflow, error) {
	fresh := false
	for range staleRetries {
		wf, err := s.definition(ctx, workflow, version, fresh)
		if err != nil {
			return 0, Workflow{}, err
		}
		args, err := triggerArgs(wf, version != 0, runs, keys)
		if err != nil {
			return 0, Workflow{}, err
		}
		var res struct {
			Current  bool  `db:"current"`
			Created  int   `db:"created"`
			Notified int64 `db:"notified"`
		}
		if err := s.db.QueryRowxContext(ctx, qTrigger, s.args(args...)...).StructScan(&res); err != nil {
			return 0, Workflow{}, unanswered("trigger", err)
		}
		if res.Current {
			return res.Created, wf, nil
		}
		s.defs.forget(workflow)
		fresh = true
	}
	return 0, Workflow{}, fmt.Errorf("trigger %q: new versions keep being applied; retry", workflow)
}

// triggerArgs are qTrigger's parameters for runs of wf (pinned: the caller
// asked for this version). Errors wrap core.ErrBadParams (see newTaskRows).
func triggerArgs(wf Workflow, pinned bool, runs []newRun, keys []sql.NullString) ([]any, error) {
	def := &wf.Definition
	ids := make([]string, len(runs))
	params := make([]string, len(runs))
	var rows taskRows
	for i, r := range runs {
		ids[i] = r.id.String()
		params[i] = string(r.params)
		if err := rows.add(def, r.id, r.pmap); err != nil {
			if len(runs) > 1 {
				return nil, &BadRunError{Index: i, Err: err}
			}
			return nil, err
		}
	}
	ikeys := make([]*string, len(runs))
	for i, k := range keys {
		if k.Valid {
			ikeys[i] = &k.String
		}
	}
	return []any{
		ids, wf.ID, wf.Name, wf.Version, params, ikeys, def.FailFast, pinned,
		rows.runIDs, rows.ids, rows.names, rows.handlers, rows.params, rows.deps,
		rows.maxAttempts, rows.initial, rows.maxBackoff, rows.timeouts, rows.keys, rows.ttls,
		NotifyChannel, TopicOutbox,
	}, nil
}

// triggerParams checks the request's params (nil means {}) with
// core.ValidateParams, and its idempotency key, and returns the params and
// their decoding (numbers kept verbatim, for the tasks' idempotency keys).
// Errors wrap core.ErrBadParams.
func triggerParams(req TriggerRequest) (json.RawMessage, map[string]any, error) {
	params := req.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	if err := core.ValidateParams(params); err != nil {
		return nil, nil, err
	}
	if err := ValidateIdempotencyKey(req.IdempotencyKey); err != nil {
		return nil, nil, err
	}
	var pmap map[string]any
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber() // numbers render verbatim in idempotency keys
	if err := dec.Decode(&pmap); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", core.ErrBadParams, err)
	}
	return params, pmap, nil
}

// taskRows are the task runs of new runs, column by column, as qTrigger
// takes them ($9..$20).
type taskRows struct {
	runIDs      []string
	ids         []string
	names       []string
	handlers    []string
	params      []string // JSON objects
	deps        []string // JSON arrays of task names
	maxAttempts []int64
	initial     []int64  // initial backoff, ms
	maxBackoff  []int64  // ms
	timeouts    []int64  // ms; 0: none
	keys        []string // "": none
	ttls        []int64  // ms; 0: a recorded result is reused for ever
}

// add appends the task runs of run runID of def, their idempotency keys
// rendered from the run's params pmap. Errors wrap core.ErrBadParams: a key
// template that cannot be rendered (a missing param) or a key that cannot
// be stored; rows is then left with a partial run.
func (rows *taskRows) add(def *core.Definition, runID uuid.UUID, pmap map[string]any) error {
	run := runID.String()
	for _, t := range def.Tasks {
		key, err := taskIdempotencyKey(def.Name, t, pmap)
		if err != nil {
			return err
		}
		params := "{}"
		if len(t.Params) > 0 && string(t.Params) != "null" {
			params = string(t.Params)
		}
		d := t.DependsOn
		if d == nil {
			d = []string{}
		}
		db, _ := json.Marshal(d)
		p := t.Policy()
		rows.runIDs = append(rows.runIDs, run)
		rows.ids = append(rows.ids, uuid.NewString())
		rows.names = append(rows.names, t.Name)
		rows.handlers = append(rows.handlers, t.Handler)
		rows.params = append(rows.params, params)
		rows.deps = append(rows.deps, string(db))
		rows.maxAttempts = append(rows.maxAttempts, int64(p.MaxAttempts))
		rows.initial = append(rows.initial, p.InitialBackoff.Milliseconds())
		rows.maxBackoff = append(rows.maxBackoff, p.MaxBackoff.Milliseconds())
		rows.timeouts = append(rows.timeouts, t.TimeoutOrZero().Milliseconds())
		rows.keys = append(rows.keys, key)
		rows.ttls = append(rows.ttls, t.IdempotencyTTLOrZero().Milliseconds())
	}
	return nil
}

// taskIdempotencyKey renders the idempotency key template of task t of
// workflow from the run's params pmap and returns it as stored ("" when t
// has none). Errors wrap core.ErrBadParams.
func taskIdempotencyKey(workflow string, t core.TaskDef, pmap map[string]any) (string, error) {
	key, err := core.RenderIdempotencyKey(t.IdempotencyKey, core.KeyData{Params: pmap, Workflow: workflow, Task: t.Name})
	if err != nil {
		return "", fmt.Errorf("%w: %v", core.ErrBadParams, err)
	}
	if key != "" {
		if key, err = core.StoredIdempotencyKey(key); err != nil {
			return "", fmt.Errorf("%w: task %q: %v", core.ErrBadParams, t.Name, err)
		}
	}
	return key, nil
}

// existingRun returns the run that holds idempotency key ikey, which a
// trigger of workflow with params found taken: the same workflow and params
// are that run (Existing); others are ErrConflict. It is a statement of its
// own, after the trigger's: the run holding the key has committed by then
// (the trigger's ON CONFLICT waited for it).
func existingRun(ctx context.Context, q sqlx.QueryerContext, ikey, workflow string, params json.RawMessage) (TriggerResult, error) {
	var existing struct {
		ID       uuid.UUID `db:"id"`
		Workflow string    `db:"workflow_name"`
		Same     bool      `db:"same"`
	}
	err := sqlx.GetContext(ctx, q, &existing, `SELECT id, workflow_name, params = $2::jsonb AS same FROM workflow_runs WHERE idempotency_key = $1`, ikey, string(params))
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

// MaxIdempotencyKeyBytes bounds a trigger's idempotency key.
const MaxIdempotencyKeyBytes = 512

// ValidateIdempotencyKey checks a trigger's idempotency key ("" is no key):
// at most MaxIdempotencyKeyBytes, valid UTF-8, no NUL character. The error
// wraps core.ErrBadParams and says what is wrong; Trigger refuses such a
// key with it before writing anything.
func ValidateIdempotencyKey(k string) error {
	switch {
	case len(k) > MaxIdempotencyKeyBytes:
		return fmt.Errorf("%w: idempotency key is %d bytes, more than %d", core.ErrBadParams, len(k), MaxIdempotencyKeyBytes)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w: idempotency key is not valid UTF-8", core.ErrBadParams)
	case strings.ContainsRune(k, 0):
		return fmt.Errorf("%w: idempotency key contains a NUL character", core.ErrBadParams)
	}
	return nil
}

// TriggerManyRequest asks for many runs of one workflow version, one per
// params object, without idempotency keys.
type TriggerManyRequest struct {
	// Workflow is the workflow's name; Version 0 means the newest.
	Workflow string
	Version  int
	// Params holds one JSON object per run (nil means {}); each is checked
	// with core.ValidateParams before anything is written.
	Params []json.RawMessage
	// Actor is recorded in the history (OS user or process id).
	Actor string
}

// TriggerManyMax bounds the runs of one TriggerMany call: one statement
// and one transaction carry them all.
const TriggerManyMax = 5000

// TriggerMany creates len(req.Params) runs of one workflow version in ONE
// statement (one transaction: all of them or none), their roots READY with
// their outbox rows, and notifies the publishers once. It returns the runs'
// ids in the order of req.Params. Errors: core.ErrBadParams (with the
// 0-based index of the first bad params object, as a *BadRunError) before
// anything is written, also for more than TriggerManyMax runs or a task
// idempotency key that cannot be rendered; ErrNotFound for an unknown
// workflow; ErrCommitOutcomeUnknown when the statement got no answer (the
// runs may all exist).
func (s *Store) TriggerMany(ctx context.Context, req TriggerManyRequest) ([]uuid.UUID, error) {
	if len(req.Params) > TriggerManyMax {
		return nil, fmt.Errorf("%w: %d runs in one batch, more than %d", core.ErrBadParams, len(req.Params), TriggerManyMax)
	}
	if len(req.Params) == 0 {
		return nil, nil
	}
	runs := make([]newRun, len(req.Params))
	for i, p := range req.Params {
		params, pmap, err := triggerParams(TriggerRequest{Params: p})
		if err != nil {
			return nil, &BadRunError{Index: i, Err: err}
		}
		runs[i] = newRun{id: uuid.New(), params: params, pmap: pmap}
	}
	created, _, err := s.insertRuns(ctx, req.Workflow, req.Version, runs, nil)
	if err != nil {
		return nil, err
	}
	if created != len(runs) {
		// Unreachable: runs without keys cannot conflict.
		return nil, fmt.Errorf("trigger %q: %d of %d runs created", req.Workflow, created, len(runs))
	}
	ids := make([]uuid.UUID, len(runs))
	for i, r := range runs {
		ids[i] = r.id
	}
	return ids, nil
}

// BadRunError is TriggerMany's refusal of the params of one run (Index,
// 0-based, in the request's Params); Err wraps core.ErrBadParams.
type BadRunError struct {
	Index int
	Err   error
}

func (e *BadRunError) Error() string { return fmt.Sprintf("run %d: %v", e.Index+1, e.Err) }

func (e *BadRunError) Unwrap() error { return e.Err }

// CheckRuns checks, writing nothing, that runs of version (0: the newest)
// of workflow can be created with each of params: each is a params object
// (core.ValidateParams) from which every task's idempotency key renders.
// It returns the version it checked against, which a caller creating the
// runs in several TriggerMany calls passes to each so that all are of one
// version. Errors: a *BadRunError (wrapping core.ErrBadParams) naming the
// first bad params object, ErrNotFound for an unknown workflow.
func (s *Store) CheckRuns(ctx context.Context, workflow string, version int, params []json.RawMessage) (int, error) {
	wf, err := s.definition(ctx, workflow, version, false)
	if err != nil {
		return 0, err
	}
	for i, p := range params {
		_, pmap, err := triggerParams(TriggerRequest{Params: p})
		if err == nil {
			var rows taskRows
			err = rows.add(&wf.Definition, uuid.Nil, pmap)
		}
		if err != nil {
			return 0, &BadRunError{Index: i, Err: err}
		}
	}
	return wf.Version, nil
}
