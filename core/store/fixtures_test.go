package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// fixture is a migrated throwaway database: the store under test and a raw
// connection for the checks the store's API does not expose (row counts,
// the database clock).
type fixture struct {
	t   *testing.T
	ctx context.Context
	s   *store.Store
	db  *sql.DB
	url string // the database's
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s, db, url := storetest.NewWithDB(t)
	return &fixture{t: t, ctx: t.Context(), s: s, db: db, url: url}
}

// apply parses and stores a workflow definition.
func (f *fixture) apply(src string) store.Workflow {
	f.t.Helper()
	return storetest.Apply(f.t, f.s, src)
}

// trigger starts a run of workflow with params ("": {}).
func (f *fixture) trigger(workflow string, params string) uuid.UUID {
	f.t.Helper()
	return storetest.Trigger(f.t, f.s, workflow, params)
}

// tasks returns the run's tasks by name.
func (f *fixture) tasks(runID uuid.UUID) map[string]store.TaskRun {
	f.t.Helper()
	run, err := f.s.GetRun(f.ctx, runID)
	if err != nil {
		f.t.Fatalf("get run: %v", err)
	}
	out := make(map[string]store.TaskRun, len(run.Tasks))
	for _, tr := range run.Tasks {
		out[tr.Name] = tr
	}
	return out
}

func (f *fixture) task(id uuid.UUID) store.TaskDetail {
	f.t.Helper()
	d, err := f.s.GetTask(f.ctx, id)
	if err != nil {
		f.t.Fatalf("get task %s: %v", id, err)
	}
	return d
}

func (f *fixture) run(id uuid.UUID) store.Run {
	f.t.Helper()
	r, err := f.s.GetRun(f.ctx, id)
	if err != nil {
		f.t.Fatalf("get run %s: %v", id, err)
	}
	return r
}

// taskID returns the id of the run's task called name.
func (f *fixture) taskID(runID uuid.UUID, name string) uuid.UUID {
	f.t.Helper()
	tr, ok := f.tasks(runID)[name]
	if !ok {
		f.t.Fatalf("run %s has no task %q", runID, name)
	}
	return tr.ID
}

// claim claims a READY task with its current token, as a worker holding
// its dispatch message would.
func (f *fixture) claim(id uuid.UUID, worker string, lease time.Duration) store.ClaimedTask {
	f.t.Helper()
	state, tok, err := f.s.TaskStateOf(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	if state != core.TaskReady {
		f.t.Fatalf("claim %s: task is %s, want READY", id, state)
	}
	c, ok, err := f.s.Claim(f.ctx, id, tok, worker, lease)
	if err != nil || !ok {
		f.t.Fatalf("claim %s with token %d: ok=%v err=%v", id, tok, ok, err)
	}
	return c
}

// finish reports an outcome for a claimed task and insists it was recorded.
func (f *fixture) finish(c store.ClaimedTask, req store.FinishRequest) core.TaskState {
	f.t.Helper()
	req.ID, req.Token = c.ID, c.FencingToken
	if req.WorkerID == "" {
		req.WorkerID = "w1"
	}
	st, ok, err := f.s.Finish(f.ctx, req)
	if err != nil || !ok {
		f.t.Fatalf("finish %s: ok=%v err=%v", c.ID, ok, err)
	}
	return st
}

func (f *fixture) succeed(c store.ClaimedTask) {
	f.t.Helper()
	if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"ok":true}`)}); st != core.TaskSucceeded {
		f.t.Fatalf("finish: state %s", st)
	}
}

// runTask claims a READY task and finishes it successfully.
func (f *fixture) runTask(id uuid.UUID) {
	f.t.Helper()
	f.succeed(f.claim(id, "w1", 30*time.Second))
}

// runTaskUncounted claims a READY task and records its success as a
// binary older than migration 00014 did (and as a finish whose count fell
// short leaves it): SUCCEEDED with its history row, counted by none of its
// children, so that promoting them is the scheduler's pass's. The tests of
// the pass's own mechanisms (run locks, state re-checks, joins) use it; a
// finish that counts promotes the children itself (the counter join, see
// TestAFinishPromotesAChildOnlyWhenItsLastParentSucceeds).
func (f *fixture) runTaskUncounted(id uuid.UUID) {
	f.t.Helper()
	f.succeedUncounted(f.claim(id, "w1", 30*time.Second))
}

// succeedUncounted records the success of the claimed attempt c as
// runTaskUncounted does.
func (f *fixture) succeedUncounted(c store.ClaimedTask) {
	f.t.Helper()
	if _, err := f.db.ExecContext(f.ctx, `
WITH fin AS (
    UPDATE task_runs SET state = 'SUCCEEDED', result = '{"ok":true}', lease_expires_at = NULL, finished_at = now()
     WHERE id = $1 AND fencing_token = $2 AND state = 'RUNNING'
 RETURNING id, run_id, attempt, fencing_token
)
INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor)
SELECT id, run_id, 'RUNNING', 'SUCCEEDED', attempt, fencing_token, 'w1', 'w1' FROM fin`, c.ID, c.FencingToken); err != nil {
		f.t.Fatalf("finish %s uncounted: %v", c.ID, err)
	}
}

// pendingAsOfOld makes the run PENDING and unstarted, as a binary older
// than issue 24 triggered it (the trigger now writes a run RUNNING).
func (f *fixture) pendingAsOfOld(run uuid.UUID) {
	f.t.Helper()
	if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'PENDING', started_at = NULL WHERE id = $1`, run); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) advance() store.AdvanceResult {
	f.t.Helper()
	res, err := f.s.Advance(f.ctx, nil, 1000, "test-scheduler")
	if err != nil {
		f.t.Fatalf("advance: %v", err)
	}
	return res
}

func (f *fixture) state(id uuid.UUID) (core.TaskState, int64) {
	f.t.Helper()
	st, tok, err := f.s.TaskStateOf(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return st, tok
}

func (f *fixture) wantState(id uuid.UUID, want core.TaskState) {
	f.t.Helper()
	if st, _ := f.state(id); st != want {
		f.t.Fatalf("task %s is %s, want %s", id, st, want)
	}
}

// count runs a count(*) query.
func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRowContext(f.ctx, query, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (f *fixture) outboxRows(taskID uuid.UUID) int {
	return f.count(`SELECT count(*) FROM outbox WHERE task_run_id = $1`, taskID)
}

// waitDB polls a boolean query until it is true or the deadline passes.
// Time-based conditions are decided by the database clock, never ours.
func (f *fixture) waitDB(what, query string, args ...any) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ok bool
		if err := f.db.QueryRowContext(f.ctx, query, args...).Scan(&ok); err != nil {
			f.t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // poll interval, not a wait for state
	}
}

// waitLeaseExpired polls until the database clock passes the task's lease.
func (f *fixture) waitLeaseExpired(id uuid.UUID) {
	f.t.Helper()
	f.waitDB("lease to expire", `SELECT lease_expires_at < now() FROM task_runs WHERE id = $1`, id)
}

// waitRetryDue polls until the database clock passes the task's retry time.
func (f *fixture) waitRetryDue(id uuid.UUID) {
	f.t.Helper()
	f.waitDB("retry to fall due", `SELECT next_attempt_at <= now() FROM task_runs WHERE id = $1`, id)
}

// together runs fn(i) for i in [0,n) in n goroutines released at once, and
// waits for all of them.
func together(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

func zeroBackoff(core.RetryPolicy, int) time.Duration { return 0 }

const oneTask = `
name: one
tasks:
  - {name: a, handler: noop}
`

// twoRoots is a workflow of two independent tasks: a finish of one of them
// leaves the run open (the other is still to run), so the finish names
// the run to the schedulers, where a single-task run's success settles
// the run in the finish itself.
const twoRoots = `
name: two
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop}
`

const oneShot = `
name: oneshot
tasks:
  - {name: a, handler: noop, retry: {max_attempts: 1}}
`
