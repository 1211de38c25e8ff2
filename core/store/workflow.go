package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// Workflow is one stored version of a workflow definition.
type Workflow struct {
	ID         int64           `db:"id" json:"-"`
	Name       string          `db:"name" json:"name"`
	Version    int             `db:"version" json:"version"`
	Definition core.Definition `db:"-" json:"definition"`
	CreatedAt  time.Time       `db:"created_at" json:"created_at"`
	RawDef     []byte          `db:"definition" json:"-"`
	// flow are the definition's compiled flow-control keys (nil: none),
	// compiled once per decoded version so that a trigger evaluates them
	// without compiling CEL per run.
	flow *core.FlowPrograms
}

func (w *Workflow) decode() error {
	if err := json.Unmarshal(w.RawDef, &w.Definition); err != nil {
		return fmt.Errorf("decode stored definition of %s v%d: %w", w.Name, w.Version, err)
	}
	flow, err := core.NewFlowPrograms(&w.Definition)
	if err != nil {
		return fmt.Errorf("decode stored definition of %s v%d: %w", w.Name, w.Version, err)
	}
	w.flow = flow
	return nil
}

// flowPrograms returns w's compiled flow-control keys, compiling them when
// w was not built by decode (nil: none).
func (w *Workflow) flowPrograms() (*core.FlowPrograms, error) {
	if w.flow != nil || !w.Definition.UsesFlowControl() {
		return w.flow, nil
	}
	return core.NewFlowPrograms(&w.Definition)
}

const qLatestWorkflow = `
SELECT id, name, version, definition, created_at
  FROM workflows WHERE name = $1::text ORDER BY version DESC LIMIT 1`

const qInsertWorkflow = `
INSERT INTO workflows (name, version, definition) VALUES ($1, $2, $3)
RETURNING id, name, version, definition, created_at`

// ApplyWorkflow stores def (already validated) as the workflow's newest
// version. An unchanged definition (equal as jsonb) is a no-op and returns
// the existing version with created=false; a changed one becomes version
// n+1. Concurrent applies of one name are serialised by an advisory lock.
func (s *Store) ApplyWorkflow(ctx context.Context, def *core.Definition) (Workflow, bool, error) {
	if err := def.Validate(); err != nil {
		return Workflow{}, false, err
	}
	raw, err := json.Marshal(def)
	if err != nil {
		return Workflow{}, false, fmt.Errorf("encode definition: %w", err)
	}
	var wf Workflow
	created := false
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		wf, created, err = applyWorkflowTx(ctx, tx, def, raw)
		return err
	})
	s.defs.forget(def.Name) // this process triggers the new version without a retry
	if err != nil {
		return Workflow{}, false, err
	}
	return wf, created, wf.decode()
}

// GetWorkflow returns version of the named workflow, the newest when
// version is 0. It returns ErrNotFound when there is none.
func (s *Store) GetWorkflow(ctx context.Context, name string, version int) (Workflow, error) {
	return getWorkflow(ctx, s.db, name, version)
}

func getWorkflow(ctx context.Context, q SQLRowQueryer, name string, version int) (Workflow, error) {
	return getWorkflowArgs(ctx, SQLQuerier(q), name, version, func(a ...any) []any { return a })
}

// getWorkflowArgs is getWorkflow on any Querier (a trigger's, which may be
// a caller's transaction) with args applied to the query's arguments
// (Store.args).
func getWorkflowArgs(ctx context.Context, q Querier, name string, version int, args func(...any) []any) (Workflow, error) {
	var wf Workflow
	query, qargs := qLatestWorkflow, args(name)
	if version != 0 {
		query, qargs = `SELECT id, name, version, definition, created_at FROM workflows WHERE name = $1::text AND version = $2::int`, args(name, version)
	}
	err := q.QueryRow(ctx, query, qargs...).Scan(&wf.ID, &wf.Name, &wf.Version, &wf.RawDef, &wf.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		if version != 0 {
			return Workflow{}, fmt.Errorf("workflow %q version %d: %w", name, version, ErrNotFound)
		}
		return Workflow{}, fmt.Errorf("workflow %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Workflow{}, fmt.Errorf("read workflow %q: %w", name, err)
	}
	return wf, wf.decode()
}

// WorkflowSummary is one line of ListWorkflows.
type WorkflowSummary struct {
	Name      string    `db:"name" json:"name"`
	Version   int       `db:"version" json:"version"`
	Tasks     int       `db:"tasks" json:"tasks"`
	CreatedAt time.Time `db:"created_at" json:"created_at"`
	Runs      int64     `db:"runs" json:"runs"`
	// Paused is the workflow's pause, nil (JSON null) when it is not
	// paused.
	Paused *Pause `db:"-" json:"paused"`
}

// ListWorkflows returns the newest version of every workflow, by name, at
// most limit (0 means 100), each with its pause if it is paused.
func (s *Store) ListWorkflows(ctx context.Context, limit int) ([]WorkflowSummary, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []WorkflowSummary
	err := s.db.SelectContext(ctx, &out, `
SELECT DISTINCT ON (w.name) w.name, w.version, jsonb_array_length(w.definition->'tasks') AS tasks, w.created_at,
       (SELECT count(*) FROM workflow_runs r WHERE r.workflow_name = w.name) AS runs
  FROM workflows w ORDER BY w.name, w.version DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	pauses, err := s.WorkflowPauses(ctx)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	byName := make(map[string]*Pause, len(pauses))
	for i := range pauses {
		byName[pauses[i].Workflow] = &pauses[i]
	}
	for i := range out {
		out[i].Paused = byName[out[i].Name]
	}
	return out, nil
}

// definition returns the workflow version a trigger creates runs of: the
// one asked for (version > 0) or the newest (version 0), from the Store's
// cache unless fresh. A cached newest version may have been superseded by
// an apply elsewhere: qTrigger checks it still is the newest and inserts
// nothing otherwise, and the caller reloads with fresh. An asked-for
// version is cached for good: versions are never updated or deleted.
// A definition not cached is read on q (the trigger's own: a caller's
// transaction reads it there). Errors: those of GetWorkflow.
func (s *Store) definition(ctx context.Context, q Querier, name string, version int, fresh bool) (Workflow, error) {
	if !fresh {
		if wf, ok := s.defs.get(name, version); ok {
			return wf, nil
		}
	}
	wf, err := getWorkflowArgs(ctx, q, name, version, s.args)
	if err != nil {
		return Workflow{}, err
	}
	s.defs.put(version, wf)
	return wf, nil
}

// defCacheMax bounds the definitions a Store caches; past it the cache
// starts again empty.
const defCacheMax = 256

// defKey names a cached definition: version 0 is "the newest".
type defKey struct {
	name    string
	version int
}

// defCache is a Store's cache of workflow definitions, safe for concurrent
// use. Its Workflows are shared: callers must not modify them.
type defCache struct {
	mu   sync.Mutex
	defs map[defKey]Workflow
}

func newDefCache() *defCache { return &defCache{defs: map[defKey]Workflow{}} }

func (c *defCache) get(name string, version int) (Workflow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wf, ok := c.defs[defKey{name, version}]
	return wf, ok
}

// put caches wf, read as version (0: the newest).
func (c *defCache) put(version int, wf Workflow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.defs) >= defCacheMax {
		clear(c.defs)
	}
	c.defs[defKey{wf.Name, version}] = wf
	c.defs[defKey{wf.Name, wf.Version}] = wf
}

// forget drops the cached newest version of name (its numbered versions
// stay: they do not change).
func (c *defCache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.defs, defKey{name, 0})
}

// applyWorkflowTx is ApplyWorkflow's work inside tx (raw is def encoded):
// it returns the newest version and whether this call created it.
// Concurrent applies of one name are serialised by an advisory lock held
// until tx ends.
func applyWorkflowTx(ctx context.Context, tx *sqlx.Tx, def *core.Definition, raw []byte) (Workflow, bool, error) {
	if err := lockWorkflowName(ctx, tx, def.Name); err != nil {
		return Workflow{}, false, err
	}
	var cur Workflow
	err := tx.GetContext(ctx, &cur, qLatestWorkflow, def.Name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		cur.Version = 0
	case err != nil:
		return Workflow{}, false, fmt.Errorf("read workflow %q: %w", def.Name, err)
	default:
		var same bool
		if err := tx.GetContext(ctx, &same, `SELECT $1::jsonb = $2::jsonb`, cur.RawDef, raw); err != nil {
			return Workflow{}, false, fmt.Errorf("compare workflow %q: %w", def.Name, err)
		}
		if same {
			return cur, false, nil
		}
	}
	if err := checkChildWorkflows(ctx, tx, def); err != nil {
		return Workflow{}, false, err
	}
	var wf Workflow
	if err := tx.GetContext(ctx, &wf, qInsertWorkflow, def.Name, cur.Version+1, raw); err != nil {
		return Workflow{}, false, fmt.Errorf("insert workflow %q: %w", def.Name, err)
	}
	return wf, true, raiseLanguageFloor(ctx, tx, def)
}

// qLockWorkflowName takes the advisory lock that serialises every writer of
// workflow $1's versions (apply, rollback) until the transaction ends.
const qLockWorkflowName = `SELECT pg_advisory_xact_lock(hashtext('flowforge.workflow.' || $1))`

// lockWorkflowName takes, in tx, the lock every transaction that adds a
// version of workflow name holds: a writer reads the newest version and
// inserts the next one under it, so no two pick one number.
func lockWorkflowName(ctx context.Context, tx *sqlx.Tx, name string) error {
	if _, err := tx.ExecContext(ctx, qLockWorkflowName, name); err != nil {
		return fmt.Errorf("lock workflow %q: %w", name, err)
	}
	return nil
}

// checkChildWorkflows refuses def when a task of it starts a child run of
// a workflow that is not applied, or when the workflows its tasks start
// (their newest versions, and theirs in turn) start def's workflow again:
// a cycle of child runs that would only end at --max-child-depth. The
// error wraps core.ErrBadWorkflow and names the path. A cycle made by two
// applies at once (each reading the other's older version) is not seen
// here; the depth bound ends it at run time.
func checkChildWorkflows(ctx context.Context, tx *sqlx.Tx, def *core.Definition) error {
	type step struct{ name, path string }
	var todo []step
	for _, t := range def.Tasks {
		if t.Workflow != nil {
			todo = append(todo, step{t.Workflow.Name, def.Name + " -> " + t.Workflow.Name})
		}
	}
	seen := map[string]bool{}
	for len(todo) > 0 {
		st := todo[0]
		todo = todo[1:]
		if st.name == def.Name {
			return fmt.Errorf("%w: workflows start each other in a cycle (%s): each run would start another until --max-child-depth", core.ErrBadWorkflow, st.path)
		}
		if seen[st.name] {
			continue
		}
		seen[st.name] = true
		var w Workflow
		err := tx.GetContext(ctx, &w, qLatestWorkflow, st.name)
		if errors.Is(err, sql.ErrNoRows) {
			if st.path == def.Name+" -> "+st.name {
				return fmt.Errorf("%w: a task starts a child run of workflow %q, which is not applied (apply it first)", core.ErrBadWorkflow, st.name)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("read workflow %q: %w", st.name, err)
		}
		var child core.Definition
		if err := json.Unmarshal(w.RawDef, &child); err != nil {
			return fmt.Errorf("decode workflow %q: %w", st.name, err)
		}
		for _, t := range child.Tasks {
			if t.Workflow != nil {
				todo = append(todo, step{t.Workflow.Name, st.path + " -> " + t.Workflow.Name})
			}
		}
	}
	return nil
}
