package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// The workflow language in the scheduler's pass (decide.go): when,
// trigger rules, on_failure, and a finish that leaves what is not plain to
// the pass.

// finishWith claims the READY task id and records outcome (a result on
// success, a permanent error on failure).
func (f *fixture) finishWith(id uuid.UUID, outcome store.Outcome, result string) core.TaskState {
	f.t.Helper()
	req := store.FinishRequest{Outcome: outcome, Result: json.RawMessage(result)}
	if outcome == store.OutcomeFailed {
		req.Permanent, req.Error = true, "boom"
	}
	return f.finish(f.claim(id, "w1", 30*time.Second), req)
}

// wantStates checks the states of the run's tasks by name.
func (f *fixture) wantStates(run uuid.UUID, want map[string]core.TaskState) {
	f.t.Helper()
	ts := f.tasks(run)
	for name, st := range want {
		if got := ts[name].State; got != st {
			f.t.Errorf("task %s is %s, want %s", name, got, st)
		}
	}
}

const gates = `
name: gates
tasks:
  - {name: a, handler: noop}
  - {name: yes, handler: noop, depends_on: [a], when: "upstream.a.total > 1000 && params.region == 'eu'"}
  - {name: no, handler: noop, depends_on: [a], when: "upstream.a.total <= 1000"}
  - {name: below-no, handler: noop, depends_on: [no]}
  - {name: below-below, handler: noop, depends_on: [below-no]}
  - {name: plain, handler: noop, depends_on: [a]}
  - {name: done, handler: noop, depends_on: [a], trigger_rule: all_done}
  - {name: each, handler: noop, depends_on: [a], for_each: "[1, 2]"}
`

// TestAFinishLeavesAChildThatIsNotPlainToThePass: a finish counts every
// PENDING child of the task it records but promotes only a plain one (the
// counter join, joinComplete): the children with when, a trigger rule or
// for_each stay PENDING, counted, and the run is named to the schedulers;
// the pass then decides them.
func TestAFinishLeavesAChildThatIsNotPlainToThePass(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(gates)
	run := f.trigger("gates", `{"region": "eu"}`)
	ts := f.tasks(run)
	f.finishWith(ts["a"].ID, store.OutcomeSucceeded, `{"total": 1200}`)
	f.wantStates(run, map[string]core.TaskState{"plain": core.TaskReady, "yes": core.TaskPending, "no": core.TaskPending,
		"done": core.TaskPending, "each": core.TaskPending})
	for _, n := range []string{"yes", "no", "done", "each", "plain"} {
		if c := f.countOf(ts[n].ID); c != 1 {
			t.Errorf("%s counted %d upstream successes, want 1", n, c)
		}
	}
	if n := f.outboxRows(ts["yes"].ID) + f.outboxRows(ts["done"].ID) + f.outboxRows(ts["each"].ID); n != 0 {
		t.Fatalf("the finish wrote %d outbox rows for children that are not plain", n)
	}
	res := f.advance()
	f.wantStates(run, map[string]core.TaskState{"yes": core.TaskReady, "no": core.TaskSkipped, "below-no": core.TaskSkipped,
		"below-below": core.TaskSkipped, "done": core.TaskReady, "each": core.TaskRunning})
	if res.Skipped != 3 || res.Expanded != 2 {
		t.Fatalf("pass: %+v, want 3 skipped (in one pass, down the chain) and 2 elements", res)
	}
	if ev := f.task(ts["no"].ID).Events; ev[len(ev)-1].Reason == nil || *ev[len(ev)-1].Reason != "when is false: upstream.a.total <= 1000" {
		t.Fatalf("no's last history row: %+v", ev[len(ev)-1])
	}
}

// TestAWhenReadingAnUpstreamResultDecidesTheRun: the run of a when that
// is true and one that is false both end SUCCEEDED (SKIPPED tasks count
// as done), and an expression that fails at run time (a param the run
// lacks) makes its task DEAD with the expression and the error, and its
// descendants UPSTREAM_FAILED.
func TestAWhenReadingAnUpstreamResultDecidesTheRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: when
tasks:
  - {name: a, handler: noop}
  - {name: big, handler: noop, depends_on: [a], when: "upstream.a.total > params.limit"}
  - {name: after, handler: noop, depends_on: [big]}
`)
	var run uuid.UUID
	for _, tc := range []struct {
		params string
		want   map[string]core.TaskState
		run    core.RunState
	}{
		{`{"limit": 1000}`, map[string]core.TaskState{"big": core.TaskReady, "after": core.TaskPending}, core.RunRunning},
		{`{"limit": 5000}`, map[string]core.TaskState{"big": core.TaskSkipped, "after": core.TaskSkipped}, core.RunSucceeded},
		{`{}`, map[string]core.TaskState{"big": core.TaskDead, "after": core.TaskUpstreamFailed}, core.RunFailed},
	} {
		run = f.trigger("when", tc.params)
		f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{"total": 1200}`)
		f.advance()
		f.wantStates(run, tc.want)
		if got := f.run(run); got.State != tc.run {
			t.Errorf("params %s: run %s, want %s", tc.params, got.State, tc.run)
		}
	}
	// The last run's: a param the run lacks.
	big := f.task(f.taskID(run, "big"))
	if big.Error == nil || !strings.Contains(*big.Error, "upstream.a.total > params.limit") || !strings.Contains(*big.Error, "no such key: limit") {
		t.Fatalf("big's error = %v, want the expression and the error", big.Error)
	}
	if got := f.run(run); got.FinishedAt == nil || got.TasksDone != 3 {
		t.Fatalf("the failed run is not settled with every task done: %+v", got)
	}
}

// TestTriggerRulesOverASkippedAndAFailedBranch: below a SKIPPED branch and
// a DEAD one, all_done runs, none_failed fails, all_success follows the
// skip and the failure, one_success runs on a success beside them; the
// DEAD task's burial stops at the tasks whose rule runs below it.
func TestTriggerRulesOverASkippedAndAFailedBranch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: rules
tasks:
  - {name: a, handler: noop}
  - {name: skipped, handler: noop, depends_on: [a], when: "false"}
  - {name: failed, handler: noop, depends_on: [a]}
  - {name: all-done, handler: noop, depends_on: [skipped, failed], trigger_rule: all_done}
  - {name: after-all-done, handler: noop, depends_on: [all-done]}
  - {name: none-failed, handler: noop, depends_on: [skipped, failed], trigger_rule: none_failed}
  - {name: none-failed-ok, handler: noop, depends_on: [skipped, a], trigger_rule: none_failed}
  - {name: all-success-skip, handler: noop, depends_on: [skipped, a]}
  - {name: all-success-dead, handler: noop, depends_on: [skipped, failed]}
  - {name: one-success, handler: noop, depends_on: [failed, a], trigger_rule: one_success}
`)
	run := f.trigger("rules", "")
	f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{}`)
	f.finishWith(f.taskID(run, "failed"), store.OutcomeFailed, "")
	// The failure's own statement buries only what follows all_success.
	f.wantStates(run, map[string]core.TaskState{"all-success-dead": core.TaskUpstreamFailed, "none-failed": core.TaskUpstreamFailed,
		"all-done": core.TaskPending, "one-success": core.TaskPending, "after-all-done": core.TaskPending})
	f.advance()
	f.wantStates(run, map[string]core.TaskState{
		"skipped": core.TaskSkipped, "all-done": core.TaskReady, "none-failed": core.TaskUpstreamFailed,
		"none-failed-ok": core.TaskReady, "all-success-skip": core.TaskSkipped, "all-success-dead": core.TaskUpstreamFailed,
		"one-success": core.TaskReady, "after-all-done": core.TaskPending,
	})
	f.runTask(f.taskID(run, "all-done"))
	f.advance()
	f.wantState(f.taskID(run, "after-all-done"), core.TaskReady)
}

const cleanup = `
name: cleanup
fail_fast: %s
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
  - {name: slow, handler: noop}
  - {name: clean, handler: noop, on_failure: true}
`

// TestAnOnFailureTaskRunsOnlyAfterADeadTask: in a run that fails, the
// on_failure task is READY in the pass after the DEAD task settled (in a
// fail_fast run too, where it is neither cancelled nor refused its claim);
// in a run that does not fail it waits while tasks run and is SKIPPED when
// they have all ended, and the run is SUCCEEDED.
func TestAnOnFailureTaskRunsOnlyAfterADeadTask(t *testing.T) {
	t.Parallel()
	for _, failFast := range []string{"false", "true"} {
		t.Run("fail_fast "+failFast, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(strings.Replace(cleanup, "%s", failFast, 1))
			ok := f.trigger("cleanup", "")
			f.runTask(f.taskID(ok, "a"))
			f.advance()
			f.wantStates(ok, map[string]core.TaskState{"clean": core.TaskPending})
			f.runTask(f.taskID(ok, "b"))
			f.runTask(f.taskID(ok, "slow"))
			f.advance()
			f.wantStates(ok, map[string]core.TaskState{"clean": core.TaskSkipped})
			if r := f.run(ok); r.State != core.RunSucceeded || r.FinishedAt == nil {
				t.Fatalf("a run that did not fail: %s, settled %v", r.State, r.FinishedAt != nil)
			}

			bad := f.trigger("cleanup", "")
			f.finishWith(f.taskID(bad, "a"), store.OutcomeFailed, "")
			f.wantStates(bad, map[string]core.TaskState{"clean": core.TaskPending, "b": core.TaskUpstreamFailed})
			f.advance()
			f.wantStates(bad, map[string]core.TaskState{"clean": core.TaskReady})
			f.runTask(f.taskID(bad, "clean"))
			if failFast == "false" {
				f.runTask(f.taskID(bad, "slow"))
			}
			f.advance()
			if r := f.run(bad); r.State != core.RunFailed || r.FinishedAt == nil {
				t.Fatalf("a failed run after its cleanup: %s, settled %v", r.State, r.FinishedAt != nil)
			}
		})
	}
}

// TestTheFirstApplyOfTheLanguageRaisesTheCompatFloor: a version without
// the language leaves the database's floor alone; the first one with it
// raises it to LanguageFloor in its transaction, so a binary older than
// the language refuses the database; migrating again keeps the floor.
func TestTheFirstApplyOfTheLanguageRaisesTheCompatFloor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	floor := func() int64 {
		st, err := f.s.SchemaState(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Floor
	}
	before := floor()
	f.apply("name: plain\ntasks:\n  - {name: a, handler: noop}\n")
	if got := floor(); got != before || got >= store.LanguageFloor {
		t.Fatalf("a plain version moved the floor %d -> %d", before, got)
	}
	f.apply("name: lang\ntasks:\n  - {name: a, handler: noop, when: 'true'}\n")
	if got := floor(); got != store.LanguageFloor {
		t.Fatalf("floor after a version with when: %d, want %d", got, store.LanguageFloor)
	}
	if _, err := f.s.Migrate(f.ctx); err != nil {
		t.Fatal(err)
	}
	st, err := f.s.SchemaState(f.ctx)
	if err != nil || st.Floor != store.LanguageFloor {
		t.Fatalf("floor after a migrate: %+v, %v", st, err)
	}
	old := store.SchemaWindow{Min: 14, Latest: store.LanguageFloor - 1}
	if err := old.Check(st); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("an older binary's window: %v, want ErrSchemaTooNew", err)
	}
	// A held task (a sleep here) raises it to 17: a binary of schema 16
	// knows the language but would dispatch a sleep to a worker.
	f.apply("name: napper\ntasks:\n  - {name: a, sleep: {for: 1s}}\n")
	if got := floor(); got != store.HeldTasksFloor {
		t.Fatalf("floor after a version with a sleep: %d, want %d", got, store.HeldTasksFloor)
	}
	st, err = f.s.SchemaState(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := (store.SchemaWindow{Min: 16, Latest: store.HeldTasksFloor - 1}).Check(st); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("a binary of schema 16's window: %v, want ErrSchemaTooNew", err)
	}
}
