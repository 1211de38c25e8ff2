package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

// runsOf triggers n runs of workflow with params {"t": "<tenant>"}.
func (f *fixture) runsOf(workflow string, n int, tenant string) []uuid.UUID {
	f.t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = f.trigger(workflow, fmt.Sprintf(`{"t": %q}`, tenant))
	}
	return ids
}

// runWaits reports whether the run waits for its run-level slot, and its
// cancel reason ("": none).
func (f *fixture) runWaits(id uuid.UUID) (bool, string) {
	f.t.Helper()
	var wait bool
	var reason *string
	if err := f.db.QueryRowContext(f.ctx, `SELECT run_wait, cancel_reason FROM workflow_runs WHERE id = $1`, id).Scan(&wait, &reason); err != nil {
		f.t.Fatal(err)
	}
	if reason == nil {
		return wait, ""
	}
	return wait, *reason
}

const runLimitedYAML = `name: tenant
concurrency: {key: "params.t", limit: 2%s}
tasks:
  - {name: a, handler: noop}
`

// TestARunLevelKeyQueuesRunsPastItsLimit: strategy queue. Three runs of
// one tenant and one of another: the first two and the other tenant's
// start (their roots dispatched at their next pass), the third waits with
// no task READY; once a run of its tenant settles, the next round admits
// it.
func TestARunLevelKeyQueuesRunsPastItsLimit(t *testing.T) {
	f := newFixture(t)
	f.apply(fmt.Sprintf(runLimitedYAML, ""))
	runs := f.runsOf("tenant", 3, "acme")
	other := f.runsOf("tenant", 1, "globex")[0]
	for _, r := range append(runs, other) {
		if wait, _ := f.runWaits(r); !wait {
			t.Fatalf("run %s does not wait for its admission after its trigger", r)
		}
	}
	f.advance()
	if n := f.dispatched("tenant"); n != 0 {
		t.Fatalf("%d tasks dispatched before any admission, want 0", n)
	}
	res := f.admit()
	if res.Runs != 3 || res.RunsRefused+res.RunsDisplaced != 0 {
		t.Fatalf("admission %+v, want 3 runs admitted", res)
	}
	f.advance()
	if n := f.dispatched("tenant"); n != 3 {
		t.Fatalf("%d tasks dispatched, want 3 (two of acme, one of globex)", n)
	}
	if wait, _ := f.runWaits(runs[2]); !wait {
		t.Fatal("acme's third run was admitted past its limit of 2")
	}
	f.runTask(f.taskID(runs[0], "a"))
	f.advance()
	if st := f.run(runs[0]).State; st != "SUCCEEDED" {
		t.Fatalf("acme's first run is %s, want SUCCEEDED", st)
	}
	if res := f.admit(); res.Runs != 1 {
		t.Fatalf("after a run ended the round admitted %d runs, want 1", res.Runs)
	}
	f.advance()
	if n := f.outboxRows(f.taskID(runs[2], "a")); n != 1 {
		t.Fatalf("acme's third run's task has %d outbox rows after its admission, want 1", n)
	}
}

// TestARunLevelKeyWithCancelNewestCancelsTheNewRun: strategy
// cancel-newest. The run past the limit ends CANCELLED with a reason
// naming the key; the running ones go on.
func TestARunLevelKeyWithCancelNewestCancelsTheNewRun(t *testing.T) {
	f := newFixture(t)
	f.apply(fmt.Sprintf(runLimitedYAML, ", strategy: cancel-newest"))
	runs := f.runsOf("tenant", 3, "acme")
	res := f.admit()
	if res.Runs != 2 || res.RunsRefused != 1 {
		t.Fatalf("admission %+v, want 2 admitted and 1 refused", res)
	}
	f.advance()
	if st := f.run(runs[2]).State; st != "CANCELLED" {
		t.Fatalf("the newest run is %s, want CANCELLED", st)
	}
	if _, reason := f.runWaits(runs[2]); !strings.Contains(reason, "concurrency tenant/acme is full (2/2): strategy cancel-newest") {
		t.Fatalf("cancel reason %q, want it to name the key and the strategy", reason)
	}
	for _, r := range runs[:2] {
		if st := f.run(r).State; st != "RUNNING" {
			t.Fatalf("run %s is %s, want RUNNING", r, st)
		}
	}
}

// TestARunLevelKeyWithCancelInProgressCancelsTheOldestRunningRun:
// strategy cancel-in-progress, limit 1. A second run requests the
// cancellation of the running one (its task RUNNING: the worker is told on
// CancelChannel) and starts once that one has ended CANCELLED.
func TestARunLevelKeyWithCancelInProgressCancelsTheOldestRunningRun(t *testing.T) {
	f := newFixture(t)
	f.apply("name: deploy\nconcurrency: {key: \"params.t\", limit: 1, strategy: cancel-in-progress}\ntasks:\n  - {name: a, handler: noop}\n")
	first := f.runsOf("deploy", 1, "prod")[0]
	f.admit()
	f.advance()
	running := f.claim(f.taskID(first, "a"), "w1", 30*time.Second)
	second := f.runsOf("deploy", 1, "prod")[0]
	res := f.admit()
	if res.RunsDisplaced != 1 || res.Runs != 0 {
		t.Fatalf("admission %+v, want the running run displaced and none admitted yet", res)
	}
	if _, reason := f.runWaits(first); !strings.Contains(reason, "a newer run of the key replaces it") {
		t.Fatalf("the first run's cancel reason is %q", reason)
	}
	if res := f.admit(); res.RunsDisplaced != 0 {
		t.Fatalf("a second round displaced %d more runs, want 0 (one is on its way out)", res.RunsDisplaced)
	}
	f.finish(running, store.FinishRequest{Outcome: store.OutcomeCancelled, Error: "cancelled"})
	f.advance()
	if st := f.run(first).State; st != "CANCELLED" {
		t.Fatalf("the first run is %s, want CANCELLED", st)
	}
	if res := f.admit(); res.Runs != 1 {
		t.Fatalf("after the displaced run ended the round admitted %d, want 1", res.Runs)
	}
	if wait, _ := f.runWaits(second); wait {
		t.Fatal("the second run still waits")
	}
}

// TestAWaitingRunSaysWhatItWaitsFor: run show's line and `limits list`'s
// row of a run-level key.
func TestAWaitingRunSaysWhatItWaitsFor(t *testing.T) {
	f := newFixture(t)
	f.apply(fmt.Sprintf(runLimitedYAML, ""))
	runs := f.runsOf("tenant", 3, "acme")
	f.admit()
	if got := f.run(runs[2]).Waiting; got != "waiting: run concurrency tenant/acme (2/2)" {
		t.Fatalf("the waiting run says %q", got)
	}
	if got := f.run(runs[0]).Waiting; got != "" {
		t.Fatalf("an admitted run says %q, want nothing", got)
	}
	lims, err := f.s.ListLimits(f.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(lims) != 1 || lims[0].Kind != store.FlowRun || lims[0].InUse != 2 || lims[0].Waiting != 1 || lims[0].Limit != 2 {
		t.Fatalf("limits %+v, want one run key acme with 2 in use, 1 waiting, limit 2", lims)
	}
}

// TestARunLevelKeyIsScopedToItsWorkflow: two workflows whose run-level
// keys evaluate to the same value ("prod") hold separate slots: a run of
// each is admitted under limit 1, and one workflow's cancel-in-progress
// never displaces the other's run. The key is stored and shown as
// "<workflow>/<key>".
func TestARunLevelKeyIsScopedToItsWorkflow(t *testing.T) {
	f := newFixture(t)
	f.apply("name: deploy\nconcurrency: {key: \"params.t\", limit: 1, strategy: cancel-in-progress}\ntasks:\n  - {name: a, handler: noop}\n")
	f.apply("name: backup\nconcurrency: {key: \"params.t\", limit: 1}\ntasks:\n  - {name: a, handler: noop}\n")
	backup := f.runsOf("backup", 1, "prod")[0]
	deploy := f.runsOf("deploy", 1, "prod")[0]
	res := f.admit()
	if res.Runs != 2 || res.RunsDisplaced != 0 {
		t.Fatalf("admission %+v, want both runs admitted and none displaced (their keys are their workflows')", res)
	}
	for _, r := range []uuid.UUID{backup, deploy} {
		if wait, reason := f.runWaits(r); wait || reason != "" {
			t.Fatalf("run %s waits %v, cancel reason %q; want it admitted", r, wait, reason)
		}
	}
	var keys string
	if err := f.db.QueryRowContext(f.ctx, `SELECT string_agg(concurrency_key, ' ' ORDER BY concurrency_key) FROM workflow_runs`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if want := "backup/prod deploy/prod"; keys != want {
		t.Fatalf("run keys %q, want %q", keys, want)
	}
	f.runsOf("deploy", 1, "prod")
	if res := f.admit(); res.RunsDisplaced != 1 {
		t.Fatalf("admission %+v, want deploy's first run displaced", res)
	}
	if _, reason := f.runWaits(backup); reason != "" {
		t.Fatalf("backup's run was cancelled by deploy's strategy: %q", reason)
	}
	if _, reason := f.runWaits(deploy); !strings.Contains(reason, "concurrency deploy/prod: a newer run") {
		t.Fatalf("deploy's first run's cancel reason %q", reason)
	}
}

// TestARunDisplacedByCancelInProgressHasItsWaitingTasksCancelledAtOnce:
// the admission that requests a run's cancellation (cancel-in-progress)
// cancels, in its own transaction, the tasks of that run that have not
// started, as `run cancel` does: a READY task dispatched but not yet
// claimed is CANCELLED when the admission commits, and its message can
// no longer claim it.
func TestARunDisplacedByCancelInProgressHasItsWaitingTasksCancelledAtOnce(t *testing.T) {
	f := newFixture(t)
	f.apply("name: deploy\nconcurrency: {key: \"params.t\", limit: 1, strategy: cancel-in-progress}\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop}\n")
	first := f.runsOf("deploy", 1, "prod")[0]
	f.admit()
	f.advance()
	a, b := f.taskID(first, "a"), f.taskID(first, "b")
	running := f.claim(a, "w1", 30*time.Second)
	_, tokB := f.state(b)
	f.runsOf("deploy", 1, "prod")
	if res := f.admit(); res.RunsDisplaced != 1 {
		t.Fatalf("admission %+v, want the first run displaced", res)
	}
	f.wantState(b, "CANCELLED")
	if _, ok, err := f.s.Claim(f.ctx, b, tokB, "w2", 30*time.Second); err != nil || ok {
		t.Fatalf("the displaced run's unstarted task was claimed (ok %v, err %v)", ok, err)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'CANCELLED' AND reason LIKE '%a newer run of the key replaces it%'`, b); n != 1 {
		t.Fatalf("%d history rows say why the task was cancelled, want 1", n)
	}
	f.wantState(a, "RUNNING")
	f.finish(running, store.FinishRequest{Outcome: store.OutcomeCancelled, Error: "cancelled"})
	f.advance()
	if st := f.run(first).State; st != "CANCELLED" {
		t.Fatalf("the displaced run is %s, want CANCELLED", st)
	}
}
