package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/e2e/harness"
)

// The workflow language (issue 26) end to end: a scheduler, a publisher
// and a worker, each a process of its own. Modes 94 to 97.

// languageStack starts a publisher, a worker (shell allowed) and, with
// scheduler, a scheduler, each a process of its own, and applies file.
func languageStack(t *testing.T, scheduler bool, file string) (*harness.Stack, *sql.DB) {
	t.Helper()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--allow-shell", "--concurrency", "16")
	if scheduler {
		s.Daemon(t, "scheduler", "scheduler")
	}
	s.Apply(t, file)
	return s, s.DB(t)
}

// languageStates returns the states of a run's tasks by name.
func languageStates(r harness.RunJSON) map[string]string {
	out := map[string]string{}
	for _, x := range r.Tasks {
		out[x.Name] = x.State
	}
	return out
}

// languageWant fails the test unless each task named in want is in its
// state.
func languageWant(t *testing.T, r harness.RunJSON, want map[string]string) {
	t.Helper()
	got := languageStates(r)
	for name, st := range want {
		if got[name] != st {
			t.Errorf("run %s: task %s is %s, want %s (all: %v)", r.ID, name, got[name], st, got)
		}
	}
}

// TestASchedulerKilledInsideAForEachExpansionRunsEachElementOnce: mode 94.
// A shell split decides 1,000 chunks at run time (JSON written to
// $FLOWFORGE_RESULT_FILE); the scheduler that expands count over them
// dies inside the expansion's transaction (failpoint
// scheduler.exit-mid-expansion: os.Exit after the elements and their
// outbox rows were inserted, before the commit). Nothing of the expansion
// is left; a second scheduler makes it: exactly 1,000 task runs, each with
// one outbox row, claimed once and run once (each element's item written
// once; count itself, the scheduler's, is never dispatched), and merge
// gets the 1,000 results in element order.
func TestASchedulerKilledInsideAForEachExpansionRunsEachElementOnce(t *testing.T) {
	t.Parallel()
	ran := filepath.Join(t.TempDir(), "items")
	s, db := languageStack(t, false, `name: fanout
defaults:
  handler: shell
  retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 1s}
tasks:
  - name: split
    params: {command: [sh, -c, 'seq -s , 0 999 | sed "s/^/{\"chunks\": [/; s/$/]}/" > "$FLOWFORGE_RESULT_FILE"']}
  - name: count
    depends_on: [split]
    for_each: upstream.split.chunks
    params: {command: [sh, -c, 'echo "$FLOWFORGE_ITEM" >> `+ran+`; echo "{\"n\": $FLOWFORGE_ITEM}" > "$FLOWFORGE_RESULT_FILE"']}
  - {name: merge, handler: noop, depends_on: [count]}
`)
	victim := s.DaemonEnv(t, "scheduler-victim", "scheduler", []string{failpoint.EnvVar + "=" + string(failpoint.SchedulerExitMidExpansion)},
		"--id", "victim")
	id := s.Trigger(t, "fanout")
	code, err := victim.Wait(60 * time.Second)
	if err != nil || code != failpoint.ExitCode {
		t.Fatalf("victim: exit %d (%v), want the failpoint's %d\n%s", code, err, failpoint.ExitCode, victim.Logs())
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE element_of IS NOT NULL`); n != 0 {
		t.Fatalf("the dead scheduler left %d elements; its expansion must die with it", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE task_name = 'count' AND state = 'PENDING'`); n != 1 {
		t.Fatal("count is not PENDING after the dead scheduler's pass")
	}
	s.Daemon(t, "scheduler-rescuer", "scheduler", "--id", "rescuer")
	s.WaitRuns(t, "SUCCEEDED", 120*time.Second, id)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE element_of = 'count'`); n != 1000 {
		t.Fatalf("%d elements, want exactly 1000", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs t WHERE t.element_of = 'count'
	   AND (SELECT count(*) FROM outbox o WHERE o.task_run_id = t.id) <> 1`); n != 0 {
		t.Fatalf("%d elements without exactly one outbox row", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs t WHERE t.kind = 'task'
	   AND (SELECT count(*) FROM task_events e WHERE e.task_run_id = t.id AND e.from_state = 'READY' AND e.to_state = 'RUNNING') <> 1`); n != 0 {
		t.Fatalf("%d task runs were not claimed exactly once", n)
	}
	b, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		seen[l]++
	}
	for i := range 1000 {
		if seen[fmt.Sprint(i)] != 1 {
			t.Errorf("element %d ran %d times, want once", i, seen[fmt.Sprint(i)])
		}
	}
	if len(seen) != 1000 {
		t.Errorf("%d distinct elements ran, want 1000", len(seen))
	}
	var first, last int
	if err := db.QueryRow(`SELECT (result->0->>'n')::int, (result->999->>'n')::int FROM task_runs WHERE task_name = 'count'`).Scan(&first, &last); err != nil || first != 0 || last != 999 {
		t.Fatalf("count's result starts with %d and ends with %d (%v), want 0 and 999 in element order", first, last, err)
	}
}

// TestAWhenReadingAnUpstreamResultSkipsItsBranchEndToEnd: mode 95. A shell
// task's structured result decides a when: with limit 1000 the big-order
// branch runs, with limit 5000 it and the task below it are SKIPPED, and
// both runs are SUCCEEDED; `run show` prints SKIPPED.
func TestAWhenReadingAnUpstreamResultSkipsItsBranchEndToEnd(t *testing.T) {
	t.Parallel()
	s, _ := languageStack(t, true, `name: orders
tasks:
  - {name: merge, handler: shell, params: {command: [sh, -c, 'echo "{\"total\": 1200}" > "$FLOWFORGE_RESULT_FILE"']}}
  - {name: big-order-review, handler: noop, depends_on: [merge], when: "upstream.merge.total > int(params.limit) && params.region == 'eu'"}
  - {name: ship, handler: noop, depends_on: [big-order-review]}
`)
	runs := map[string]string{"1000": "SUCCEEDED", "5000": "SKIPPED"}
	ids := map[string]string{}
	for limit := range runs {
		ids[limit] = s.Trigger(t, "orders", "limit="+limit, "region=eu")
	}
	for limit, want := range runs {
		s.WaitRuns(t, "SUCCEEDED", 60*time.Second, ids[limit])
		languageWant(t, s.ShowRun(t, ids[limit]), map[string]string{"merge": "SUCCEEDED", "big-order-review": want, "ship": want})
	}
	if out := s.MustCLI(t, "run", "show", ids["5000"]); !strings.Contains(out, "SKIPPED") {
		t.Fatalf("run show does not print SKIPPED:\n%s", out)
	}
}

// TestTriggerRulesOverASkippedAndAFailedBranchEndToEnd: mode 95. Below a
// SKIPPED branch and a DEAD one, all_done runs, none_failed is
// UPSTREAM_FAILED, and all_success is SKIPPED below the skip alone; the
// run is FAILED and settles.
func TestTriggerRulesOverASkippedAndAFailedBranchEndToEnd(t *testing.T) {
	t.Parallel()
	s, _ := languageStack(t, true, `name: rules
tasks:
  - {name: a, handler: noop}
  - {name: skipped, handler: noop, depends_on: [a], when: "params.go == 'yes'"}
  - {name: failed, handler: fail, params: {permanent: true, message: broken}, depends_on: [a]}
  - {name: all-done, handler: noop, depends_on: [skipped, failed], trigger_rule: all_done}
  - {name: none-failed, handler: noop, depends_on: [skipped, failed], trigger_rule: none_failed}
  - {name: all-success, handler: noop, depends_on: [skipped, a]}
  - {name: none-failed-ok, handler: noop, depends_on: [skipped, a], trigger_rule: none_failed}
`)
	id := s.Trigger(t, "rules", "go=no")
	s.WaitRuns(t, "FAILED", 60*time.Second, id)
	languageWant(t, s.WaitRunTerminal(t, id, 60*time.Second), map[string]string{
		"skipped": "SKIPPED", "failed": "DEAD", "all-done": "SUCCEEDED", "none-failed": "UPSTREAM_FAILED",
		"all-success": "SKIPPED", "none-failed-ok": "SUCCEEDED",
	})
}

// TestAnOnFailureTaskRunsAfterADeadOneEndToEnd: mode 96. In a fail_fast
// run whose task dies, the on_failure task runs (fail_fast cancels the
// slow sibling, not the cleanup), after the DEAD task's history row; in a
// run that succeeds it is SKIPPED and the run SUCCEEDED.
func TestAnOnFailureTaskRunsAfterADeadOneEndToEnd(t *testing.T) {
	t.Parallel()
	s, db := languageStack(t, true, `name: guarded
fail_fast: true
tasks:
  - {name: a, handler: fail, params: {times: 1, permanent: true, message: broken}, when: "params.fail == 'yes'"}
  - {name: slow, handler: sleep, params: {duration: 30s}, when: "params.fail == 'yes'"}
  - {name: ok, handler: noop}
  - {name: cleanup, handler: noop, on_failure: true}
`)
	bad := s.Trigger(t, "guarded", "fail=yes")
	good := s.Trigger(t, "guarded", "fail=no")
	s.WaitRuns(t, "FAILED", 60*time.Second, bad)
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, good)
	languageWant(t, s.WaitRunTerminal(t, bad, 60*time.Second), map[string]string{"a": "DEAD", "slow": "CANCELLED", "cleanup": "SUCCEEDED"})
	languageWant(t, s.ShowRun(t, good), map[string]string{"a": "SKIPPED", "slow": "SKIPPED", "cleanup": "SKIPPED"})
	if n := harness.QueryInt(t, db, `
SELECT count(*) FROM task_events c JOIN task_runs ct ON ct.id = c.task_run_id
  JOIN task_runs at ON at.run_id = ct.run_id AND at.task_name = 'a'
  JOIN task_events d ON d.task_run_id = at.id AND d.to_state = 'DEAD'
 WHERE ct.task_name = 'cleanup' AND ct.run_id = $1 AND c.to_state = 'READY' AND c.id > d.id`, bad); n != 1 {
		t.Fatalf("cleanup was made READY %d times after a's death, want once", n)
	}
}

// TestRequeueingADeadElementLetsItsRunSucceedEndToEnd: mode 98. A shell
// element fails until a marker file exists and dies (one attempt): count
// is DEAD, merge UPSTREAM_FAILED, the run FAILED. `ffctl dead requeue` of
// the element alone, once the marker exists, brings count back to RUNNING
// in its statement (an audited DEAD -> RUNNING row, the operator's actor)
// and merge to PENDING; the element runs again, the join ends count
// SUCCEEDED with the three results in element order, merge runs, and the
// run SUCCEEDED.
func TestRequeueingADeadElementLetsItsRunSucceedEndToEnd(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "fixed")
	s, db := languageStack(t, true, `name: chunks
tasks:
  - name: count
    handler: shell
    for_each: "[0, 1, 2]"
    retry: {max_attempts: 1}
    params: {command: [sh, -c, 'test "$FLOWFORGE_ITEM" != 1 || test -e `+marker+` || { echo marker missing >&2; exit 3; }; echo "$FLOWFORGE_ITEM" > "$FLOWFORGE_RESULT_FILE"']}
  - {name: merge, handler: noop, depends_on: [count]}
`)
	id := s.Trigger(t, "chunks")
	s.WaitRuns(t, "FAILED", 60*time.Second, id)
	r := s.WaitRunTerminal(t, id, 60*time.Second)
	languageWant(t, r, map[string]string{"count": "DEAD", "count[0]": "SUCCEEDED", "count[1]": "DEAD", "count[2]": "SUCCEEDED", "merge": "UPSTREAM_FAILED"})
	element, _, _ := r.Task(t, "count[1]")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := s.MustCLI(t, "dead", "requeue", element, "--reason", "marker created"); !strings.Contains(out, "requeued "+element+" and 2 other task(s) of its run") {
		t.Fatalf("dead requeue printed %q, want count and merge moved with the element", out)
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, id)
	languageWant(t, s.ShowRun(t, id), map[string]string{"count": "SUCCEEDED", "count[1]": "SUCCEEDED", "merge": "SUCCEEDED"})
	var result string
	if err := db.QueryRow(`SELECT result::text FROM task_runs WHERE run_id = $1 AND task_name = 'count'`, id).Scan(&result); err != nil || result != "[0, 1, 2]" {
		t.Fatalf("count's result: %s (%v), want [0, 1, 2]", result, err)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events e JOIN task_runs t ON t.id = e.task_run_id
	 WHERE t.run_id = $1 AND t.task_name = 'count' AND e.from_state = 'DEAD' AND e.to_state = 'RUNNING'
	   AND e.actor LIKE 'cli:%' AND e.reason LIKE '%element count[1] requeued%marker created'`, id); n != 1 {
		t.Fatalf("%d audited DEAD -> RUNNING rows for count, want 1", n)
	}
}

// TestACancelDuringAForEachEndToEnd: mode 99. A for_each over six
// elements runs on a worker with three slots, each element waiting for a
// file of its own: with one element SUCCEEDED, three RUNNING and two
// READY, `ffctl run cancel` cancels the READY ones at once, the worker
// stops the running ones (they end CANCELLED), count ends CANCELLED with
// them, the run settles CANCELLED, and neither a READY element nor merge
// ever starts.
func TestACancelDuringAForEachEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "scheduler", "scheduler")
	s.Daemon(t, "worker", "worker", "--allow-shell", "--concurrency", "3")
	s.Apply(t, `name: gated
tasks:
  - name: count
    handler: shell
    for_each: "[0, 1, 2, 3, 4, 5]"
    params: {command: [sh, -c, 'echo "$FLOWFORGE_ITEM" >> `+started+`; while [ ! -e `+dir+`/go-$FLOWFORGE_ITEM ]; do sleep 0.05; done; echo "$FLOWFORGE_ITEM" > "$FLOWFORGE_RESULT_FILE"']}
  - {name: merge, handler: noop, depends_on: [count]}
`)
	db := s.DB(t)
	id := s.Trigger(t, "gated")
	states := func() map[string]int {
		rows, err := db.Query(`SELECT state, count(*) FROM task_runs WHERE run_id = $1 AND element_of = 'count' GROUP BY state`, id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				t.Fatal(err)
			}
			out[st] = n
		}
		return out
	}
	harness.Eventually(t, 60*time.Second, "three elements RUNNING", func() (bool, error) {
		st := states()
		return st["RUNNING"] == 3, fmt.Errorf("elements: %v", st)
	})
	var first int
	if err := db.QueryRow(`SELECT element_index FROM task_runs WHERE run_id = $1 AND element_of = 'count' AND state = 'RUNNING' ORDER BY element_index LIMIT 1`, id).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("go-%d", first)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "one element SUCCEEDED, three RUNNING, two READY", func() (bool, error) {
		st := states()
		return st["SUCCEEDED"] == 1 && st["RUNNING"] == 3 && st["READY"] == 2, fmt.Errorf("elements: %v", st)
	})
	s.MustCLI(t, "run", "cancel", id, "--reason", "bad input")
	harness.Eventually(t, 60*time.Second, "the run to settle", func() (bool, error) {
		return harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE id = $1 AND finished_at IS NOT NULL`, id) == 1, nil
	})
	r := s.ShowRun(t, id)
	if r.State != "CANCELLED" {
		t.Fatalf("run: %s, want CANCELLED", r.State)
	}
	languageWant(t, r, map[string]string{"count": "CANCELLED", "merge": "CANCELLED"})
	if st := states(); st["SUCCEEDED"] != 1 || st["CANCELLED"] != 5 || len(st) != 2 {
		t.Fatalf("elements: %v, want 1 SUCCEEDED and 5 CANCELLED", st)
	}
	for from, want := range map[string]int{"READY": 2, "RUNNING": 3} {
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events e JOIN task_runs t ON t.id = e.task_run_id
		 WHERE t.run_id = $1 AND t.element_of = 'count' AND e.from_state = $2 AND e.to_state = 'CANCELLED'`, id, from); n != want {
			t.Errorf("%d elements went %s -> CANCELLED, want %d", n, from, want)
		}
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events e JOIN task_runs t ON t.id = e.task_run_id
	 WHERE t.run_id = $1 AND t.task_name = 'merge' AND e.to_state IN ('READY', 'RUNNING')`, id); n != 0 {
		t.Errorf("merge was made READY or RUNNING %d times", n)
	}
	b, err := os.ReadFile(started)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(b))); n != 4 {
		t.Fatalf("%d elements started, want 4 (the first three and the one that took the freed slot): %q", n, b)
	}
}
