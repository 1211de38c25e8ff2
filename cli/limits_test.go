package cli_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// limits list, set and reset; run show and task show of a task waiting
// for flow control's admission.

const limitedFile = `
name: limited
tasks:
  - {name: a, handler: noop, concurrency: {key: "'customer-' + params.c", limit: 2}}
`

const ratedFile = `
name: rated
tasks:
  - {name: a, handler: noop, rate_limit: {key: stripe-api, limit: 1, per: 1m}}
`

// flowLoad applies limitedFile and ratedFile, triggers three runs of
// each, and runs the pass and one admission: two tasks of customer-42
// hold its slots and one waits; one task of stripe-api started and two
// wait. It returns the runs of limited.
func flowLoad(h *harness) []uuid.UUID {
	h.t.Helper()
	h.apply(limitedFile)
	h.apply(ratedFile)
	var runs []uuid.UUID
	for range 3 {
		runs = append(runs, storetest.Trigger(h.t, h.s, "limited", `{"c": "42"}`))
		storetest.Trigger(h.t, h.s, "rated", `{}`)
	}
	h.advance()
	if _, err := h.s.Admit(h.ctx, "", "test-scheduler"); err != nil {
		h.t.Fatalf("admit: %v", err)
	}
	return runs
}

// waitingTask returns the run of runs, and its task, that still waits
// for its slot.
func waitingTask(h *harness, runs []uuid.UUID) (run, task uuid.UUID) {
	h.t.Helper()
	for _, r := range runs {
		for _, t := range h.run(r).Tasks {
			if t.FlowWait != nil {
				return r, t.ID
			}
		}
	}
	h.t.Fatal("no task waits for its slot")
	return uuid.Nil, uuid.Nil
}

// TestLimitsListShowsEachKeyHottestFirst: the table lists both keys with
// their limits, holders and waiters; JSON has the same numbers.
func TestLimitsListShowsEachKeyHottestFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	flowLoad(h)
	out := h.must("limits", "list").stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KIND") || !strings.Contains(lines[0], "OLDEST WAIT") {
		t.Fatalf("limits list:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[0] != "rate" || f[1] != "stripe-api" || f[2] != "1/1m0s" || f[3] != "1" || f[4] != "2" {
		t.Errorf("first row %q, want rate stripe-api 1/1m0s 1 in use 2 waiting", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "concurrency" || f[1] != "customer-42" || f[2] != "2" || f[3] != "2" || f[4] != "1" {
		t.Errorf("second row %q, want concurrency customer-42 2 with 2 in use, 1 waiting", lines[2])
	}
	ls := decode[[]store.FlowLimit](t, h.must("limits", "list", "-o", "json").stdout)
	if len(ls) != 2 || ls[1].Key != "customer-42" || ls[1].InUse != 2 || ls[1].Waiting != 1 || ls[1].OperatorLimit != nil {
		t.Fatalf("limits list -o json: %+v", ls)
	}
}

// TestLimitsSetAndResetAreAuditedAndShown: set marks the limit "(set)"
// and audits the change; reset restores the definitions' limit; bad
// input exits 2 and an unknown key 1, writing nothing.
func TestLimitsSetAndResetAreAuditedAndShown(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	flowLoad(h)
	out := h.must("limits", "set", "customer-42", "--limit", "1", "--reason", "slow down").stdout
	if !strings.Contains(out, "concurrency customer-42: limit 2 -> 1 (set by the operator)") {
		t.Errorf("limits set said:\n%s", out)
	}
	if out := h.must("limits", "list").stdout; !strings.Contains(out, "1 (set)") {
		t.Errorf("limits list after set:\n%s", out)
	}
	res := decode[store.SetLimitResult](t, h.must("limits", "reset", "customer-42", "--kind", "concurrency", "--reason", "ok", "-o", "json").stdout)
	if len(res.Changes) != 1 || *res.Changes[0].Old != 1 || res.Changes[0].New != 2 {
		t.Errorf("limits reset -o json: %+v", res)
	}
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM flow_limit_events WHERE key = 'customer-42' AND actor <> '' AND reason IN ('slow down', 'ok')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d audit rows (%v), want 2", n, err)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"limits", "set", "customer-42", "--limit", "1"}, 2, "--reason is required"},
		{[]string{"limits", "set", "customer-42", "--limit", "0", "--reason", "r"}, 2, "1 to 100000"},
		{[]string{"limits", "set", "customer-42", "--reason", "r"}, 2, "--limit is required"},
		{[]string{"limits", "set", "customer-42", "--limit", "1", "--kind", "speed", "--reason", "r"}, 2, "--kind"},
		{[]string{"limits", "set", "nope", "--limit", "1", "--reason", "r"}, 1, "nope"},
		{[]string{"limits", "set", "nope", "--limit", "1", "--kind", "rate", "--reason", "r"}, 1, "once a task using it has waited"},
		{[]string{"limits", "reset", "nope", "--reason", "r"}, 1, `reset limit of "nope"`},
		{[]string{"limits", "set", "", "--limit", "2", "--reason", "r"}, 2, "the key is empty"},
		{[]string{"limits", "reset", "customer-42", "--reason", "r"}, 1, "nothing to reset"},
		{[]string{"limits", "set", "", "--limit", "2", "--kind", "concurrency", "--reason", "r"}, 2, "the key is empty"},
		{[]string{"limits", "set", "brand-new", "--limit", "2", "--kind", "run", "--reason", "r"}, 2, "<workflow>/<key>"},
		{[]string{"limits", "set", "no-such-workflow/tenant", "--limit", "2", "--kind", "run", "--reason", "r"}, 1, `no workflow "no-such-workflow"`},
	} {
		t.Run(strings.Join(c.args[1:], " "), func(t *testing.T) {
			expect(t, h.ff(c.args...), c.code, c.says)
		})
	}
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM flow_limit_events`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d audit rows after refusals (%v), want 2", n, err)
	}
}

// TestShowSaysWhatAWaitingTaskWaitsFor: run show's row and task show's
// line of a task waiting for its slot name its key, the holders and the
// limit; JSON has flow_wait and waiting.
func TestShowSaysWhatAWaitingTaskWaitsFor(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runs := flowLoad(h)
	run, id := waitingTask(h, runs)
	const want = "waiting: concurrency customer-42 (2/2)"
	if row := rowOf(t, h.must("run", "show", run.String()).stdout, id); !strings.Contains(row, want) {
		t.Errorf("run show's row %q lacks %q", row, want)
	}
	if out := h.must("task", "show", id.String()).stdout; !strings.Contains(out, "  waiting   concurrency customer-42 (2/2)\n") {
		t.Errorf("task show lacks the waiting line:\n%s", out)
	}
	js := decode[map[string]any](t, h.must("task", "show", id.String(), "-o", "json").stdout)
	if js["flow_wait"] != "concurrency" || js["waiting"] != want || js["concurrency_key"] != "customer-42" {
		t.Errorf("task show -o json: flow_wait %v, waiting %v, concurrency_key %v", js["flow_wait"], js["waiting"], js["concurrency_key"])
	}
	h.must("limits", "set", "customer-42", "--limit", "1", "--reason", "r")
	if out := h.must("task", "show", id.String()).stdout; !strings.Contains(out, "concurrency customer-42 (2/1)") {
		t.Errorf("task show after the limit was lowered:\n%s", out)
	}
	var rated uuid.UUID
	if err := h.db.QueryRowContext(h.ctx, `SELECT id FROM task_runs WHERE rate_key = 'stripe-api' AND flow_wait = 'rate' LIMIT 1`).Scan(&rated); err != nil {
		t.Fatalf("no task waits for the rate limit: %v", err)
	}
	const rateWant = "waiting: rate limit stripe-api 1/1m0s"
	if out := h.must("task", "show", rated.String(), "-o", "json").stdout; !strings.Contains(out, `"waiting": "`+rateWant+`"`) {
		t.Errorf("task show -o json of a task waiting for the rate limit lacks %q:\n%s", rateWant, out)
	}
}

// TestRunTriggerTakesAPriority: --priority sets every task's priority (it
// orders a key's waiters), of one run and of each run of a --runs-file;
// out of range it is a usage error that creates nothing.
func TestRunTriggerTakesAPriority(t *testing.T) {
	h := newHarness(t)
	h.apply(limitedFile)
	id := strings.TrimSpace(h.must("run", "trigger", "limited", "--param", "c=1", "--priority", "4").stdout)
	var prio int
	if err := h.db.QueryRow(`SELECT priority FROM task_runs WHERE run_id = $1`, id).Scan(&prio); err != nil || prio != 4 {
		t.Fatalf("the task's priority is %d (%v), want 4", prio, err)
	}
	bulk := strings.Fields(h.must("run", "trigger", "limited", "--runs-file", runsFile(t, "{\"c\": \"2\"}\n{\"c\": \"3\"}\n"), "--priority", "3").stdout)
	if len(bulk) != 2 {
		t.Fatalf("the bulk trigger printed %q, want two run ids", bulk)
	}
	for _, id := range bulk {
		if err := h.db.QueryRow(`SELECT priority FROM task_runs WHERE run_id = $1`, id).Scan(&prio); err != nil || prio != 3 {
			t.Fatalf("the bulk-triggered run %s's task has priority %d (%v), want 3", id, prio, err)
		}
	}
	for _, bad := range []string{"0", "5", "-1"} {
		r := h.ff("run", "trigger", "limited", "--param", "c=1", "--priority", bad)
		expect(t, r, 2, "--priority: priority must be between 1 (lowest) and 4 (highest), got "+bad)
		r = h.ff("run", "trigger", "limited", "--runs-file", runsFile(t, "{\"c\": \"1\"}\n"), "--priority", bad)
		expect(t, r, 2, "--priority: priority must be between 1 (lowest) and 4 (highest), got "+bad)
	}
	if n := h.runCount(); n != 3 {
		t.Fatalf("%d runs exist, want 3", n)
	}
}
