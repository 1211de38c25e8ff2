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

const qInsertRun = `
INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, params, idempotency_key, fail_fast)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (idempotency_key) DO NOTHING`

// Root tasks are inserted READY with fencing token 1 and get their outbox
// rows in the same transaction: no scheduler hop before the first dispatch.
const qInsertTasks = `
INSERT INTO task_runs (id, run_id, task_name, handler, params, depends_on, state, max_attempts,
                       initial_backoff_ms, max_backoff_ms, timeout_ms, idempotency_key,
                       fencing_token, ready_at, idempotency_ttl_ms)
SELECT u.id, $1, u.name, u.handler, u.params, ARRAY(SELECT jsonb_array_elements_text(u.deps)),
       CASE WHEN jsonb_array_length(u.deps) = 0 THEN 'READY' ELSE 'PENDING' END,
       u.max_attempts, u.initial_ms, u.max_ms, u.timeout_ms, NULLIF(u.ikey, ''),
       CASE WHEN jsonb_array_length(u.deps) = 0 THEN 1 ELSE 0 END,
       CASE WHEN jsonb_array_length(u.deps) = 0 THEN now() END, NULLIF(u.ttl_ms, 0)
  FROM unnest($2::uuid[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[], $7::int[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::bigint[])
       AS u(id, name, handler, params, deps, max_attempts, initial_ms, max_ms, timeout_ms, ikey, ttl_ms)`

const qInsertRootOutbox = `
INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
SELECT id, fencing_token, ` + dispatchPayloadSQL + `
  FROM task_runs WHERE run_id = $1 AND state = 'READY'`

// Trigger validates the request, then in ONE transaction creates the run,
// its task runs (roots READY with their outbox rows) and notifies the
// publishers. Errors: core.ErrBadParams for bad params, ErrNotFound for an
// unknown workflow, ErrConflict for an idempotency key reused with other
// params, core.ErrBadParams also when a task's idempotency_key template
// cannot be rendered from the params (a missing param).
func (s *Store) Trigger(ctx context.Context, req TriggerRequest) (TriggerResult, error) {
	params, pmap, err := triggerParams(req)
	if err != nil {
		return TriggerResult{}, err
	}
	wf, err := s.GetWorkflow(ctx, req.Workflow, req.Version)
	if err != nil {
		return TriggerResult{}, err
	}
	def := wf.Definition
	rows, err := newTaskRows(&def, pmap)
	if err != nil {
		return TriggerResult{}, err
	}
	runID := uuid.New()
	var ikey sql.NullString
	if req.IdempotencyKey != "" {
		ikey = sql.NullString{String: req.IdempotencyKey, Valid: true}
	}
	res := TriggerResult{RunID: runID}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		r, err := tx.ExecContext(ctx, qInsertRun, runID, wf.ID, wf.Name, wf.Version, string(params), ikey, def.FailFast)
		if err != nil {
			return fmt.Errorf("insert run: %w", err)
		}
		if k, _ := r.RowsAffected(); k == 0 {
			existing, err := existingRun(ctx, tx, req.IdempotencyKey, wf.Name, params)
			if err != nil {
				return err
			}
			res = existing
			return nil
		}
		if _, err := tx.ExecContext(ctx, qInsertTasks, runID, rows.ids, rows.names, rows.handlers, rows.params, rows.deps,
			rows.maxAttempts, rows.initial, rows.maxBackoff, rows.timeouts, rows.keys, rows.ttls); err != nil {
			return fmt.Errorf("insert task runs: %w", err)
		}
		if _, err := tx.ExecContext(ctx, qInsertRootOutbox, runID); err != nil {
			return fmt.Errorf("insert outbox rows: %w", err)
		}
		return notify(ctx, tx, TopicOutbox, TopicTasks)
	})
	if err != nil {
		return TriggerResult{}, err
	}
	return res, nil
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

// taskRows are the task runs of a new run, column by column, as
// qInsertTasks takes them ($2..$12).
type taskRows struct {
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

// newTaskRows builds the task runs of a run of def, their idempotency keys
// rendered from the run's params pmap. Errors wrap core.ErrBadParams: a key
// template that cannot be rendered (a missing param) or a key that cannot
// be stored.
func newTaskRows(def *core.Definition, pmap map[string]any) (taskRows, error) {
	n := len(def.Tasks)
	rows := taskRows{
		ids: make([]string, n), names: make([]string, n), handlers: make([]string, n),
		params: make([]string, n), deps: make([]string, n),
		maxAttempts: make([]int64, n), initial: make([]int64, n), maxBackoff: make([]int64, n),
		timeouts: make([]int64, n), keys: make([]string, n), ttls: make([]int64, n),
	}
	for i, t := range def.Tasks {
		rows.ids[i] = uuid.NewString()
		rows.names[i] = t.Name
		rows.handlers[i] = t.Handler
		rows.params[i] = "{}"
		if len(t.Params) > 0 && string(t.Params) != "null" {
			rows.params[i] = string(t.Params)
		}
		d := t.DependsOn
		if d == nil {
			d = []string{}
		}
		db, _ := json.Marshal(d)
		rows.deps[i] = string(db)
		p := t.Policy()
		rows.maxAttempts[i] = int64(p.MaxAttempts)
		rows.initial[i] = p.InitialBackoff.Milliseconds()
		rows.maxBackoff[i] = p.MaxBackoff.Milliseconds()
		rows.timeouts[i] = t.TimeoutOrZero().Milliseconds()
		key, err := taskIdempotencyKey(def.Name, t, pmap)
		if err != nil {
			return taskRows{}, err
		}
		rows.keys[i] = key
		rows.ttls[i] = t.IdempotencyTTLOrZero().Milliseconds()
	}
	return rows, nil
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
// are that run (Existing); others are ErrConflict.
func existingRun(ctx context.Context, tx *sqlx.Tx, ikey, workflow string, params json.RawMessage) (TriggerResult, error) {
	var existing struct {
		ID       uuid.UUID `db:"id"`
		Workflow string    `db:"workflow_name"`
		Same     bool      `db:"same"`
	}
	err := tx.GetContext(ctx, &existing, `SELECT id, workflow_name, params = $2::jsonb AS same FROM workflow_runs WHERE idempotency_key = $1`, ikey, string(params))
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
