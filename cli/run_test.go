package cli_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// runOut is the subset of the run JSON shape the tests read.
type runOut struct {
	ID              string         `json:"id"`
	Workflow        string         `json:"workflow"`
	WorkflowVersion int            `json:"workflow_version"`
	State           string         `json:"state"`
	Params          map[string]any `json:"params"`
	IdempotencyKey  *string        `json:"idempotency_key"`
	CreatedAt       string         `json:"created_at"`
	FinishedAt      *string        `json:"finished_at"`
	TasksTotal      int            `json:"tasks_total"`
	TasksDone       int            `json:"tasks_done"`
	Existing        bool           `json:"existing"`
	Tasks           []struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		State string `json:"state"`
	} `json:"tasks"`
}

var uuidLine = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`)

func TestRunListFiltersAndPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	h.apply("name: other\ntasks:\n  - {name: x, handler: noop}\n")
	var ids []uuid.UUID
	for range 3 {
		ids = append(ids, h.trigger("twostep"))
	}
	h.trigger("other")

	page1 := decode[[]runOut](t, h.must("run", "list", "--workflow", "twostep", "--limit", "2", "-o", "json").stdout)
	if len(page1) != 2 || page1[0].ID != ids[2].String() || page1[1].ID != ids[1].String() {
		t.Fatalf("page 1: %+v", page1)
	}
	page2 := decode[[]runOut](t, h.must("run", "list", "--workflow", "twostep", "--limit", "2", "--before", page1[1].CreatedAt, "-o", "json").stdout)
	if len(page2) != 1 || page2[0].ID != ids[0].String() {
		t.Fatalf("page 2: %+v", page2)
	}
	if all := decode[[]runOut](t, h.must("run", "list", "-o", "json").stdout); len(all) != 4 {
		t.Fatalf("all runs: %d, want 4", len(all))
	}
	if none := h.must("run", "list", "--state", "succeeded", "-o", "json").stdout; none != "[]\n" {
		t.Fatalf("empty list as JSON: %q, want []", none)
	}
	table := h.must("run", "list", "--workflow", "other").stdout
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "RUN ID                                WORKFLOW  STATE    TASKS  CREATED") ||
		!strings.Contains(lines[1], "  other     RUNNING  0/1    ") {
		t.Fatalf("run list table:\n%s", table)
	}
}

func TestRunShow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID, dead := h.deadRun()
	run := decode[runOut](t, h.must("run", "show", runID.String(), "-o", "json").stdout)
	if run.ID != runID.String() || run.State != "FAILED" || run.TasksDone != 2 || run.TasksTotal != 2 || run.FinishedAt == nil {
		t.Fatalf("run show JSON: %+v", run)
	}
	out := h.must("run", "show", runID.String()).stdout
	for _, want := range []string{"run " + runID.String(), "state     FAILED", "tasks     2/2 done", "a    ", "  b   " + dead.String() + "  DEAD", "boom"} {
		if !strings.Contains(out, want) {
			t.Fatalf("run show lacks %q:\n%s", want, out)
		}
	}
}

// TestRunShowUsesDAGOrderInTableAndJSON checks that the tasks of a run
// come in DAG order (roots first) in the table and in -o json alike, and
// that the dashboard's 8-character id prefix names the run (issue 11: JSON
// listed them alphabetically; a prefix was "malformed").
func TestRunShowUsesDAGOrderInTableAndJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: dag\ntasks:\n  - {name: zeta, handler: noop}\n  - {name: alpha, handler: noop, depends_on: [zeta]}\n  - {name: mid, handler: noop, depends_on: [alpha]}\n")
	want := []string{"zeta", "alpha", "mid"}
	trig := decode[struct {
		Tasks []struct{ Name string } `json:"tasks"`
	}](t, h.must("run", "trigger", "dag", "-o", "json").stdout)
	runID := h.trigger("dag")
	for _, args := range [][]string{{"run", "show", runID.String(), "-o", "json"}, {"run", "show", runID.String()[:8], "-o", "json"}} {
		run := decode[struct {
			ID    string                  `json:"id"`
			Tasks []struct{ Name string } `json:"tasks"`
		}](t, h.must(args...).stdout)
		var got []string
		for _, tk := range run.Tasks {
			got = append(got, tk.Name)
		}
		if run.ID != runID.String() || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("%v: run %s tasks %v, want %v", args, run.ID, got, want)
		}
	}
	var got []string
	for _, tk := range trig.Tasks {
		got = append(got, tk.Name)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("run trigger -o json: tasks %v, want %v", got, want)
	}
	out := h.must("run", "show", runID.String()[:8]).stdout
	z, a, m := strings.Index(out, "\nzeta "), strings.Index(out, "\n  alpha "), strings.Index(out, "\n    mid ")
	if z < 0 || a < z || m < a {
		t.Fatalf("run show table not in DAG order:\n%s", out)
	}
}

func TestRunCancelIsPersistedAuditedAndReachesRunningTasks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: trio\ntasks:\n  - {name: slow, handler: sleep}\n  - {name: idle, handler: noop}\n  - {name: later, handler: noop, depends_on: [slow]}\n")
	runID := h.trigger("trio")
	running := h.claim(h.taskID(runID, "slow"), "w1")

	r := h.must("run", "cancel", runID.String(), "--reason", "wrong input", "-o", "json")
	res := decode[struct {
		RunID          string `json:"run_id"`
		Cancelled      bool   `json:"cancelled"`
		TasksCancelled int    `json:"tasks_cancelled"`
	}](t, r.stdout)
	if res.RunID != runID.String() || !res.Cancelled || res.TasksCancelled != 2 {
		t.Fatalf("cancel JSON: %+v", res)
	}
	var requested bool
	if err := h.db.QueryRowContext(h.ctx, `SELECT cancel_requested_at IS NOT NULL FROM workflow_runs WHERE id = $1`, runID).Scan(&requested); err != nil || !requested {
		t.Fatalf("cancellation not persisted: %v %v", requested, err)
	}
	for _, name := range []string{"idle", "later"} {
		id := h.taskID(runID, name)
		if st := h.state(id); st != core.TaskCancelled {
			t.Fatalf("%s is %s, want CANCELLED", name, st)
		}
		d, err := h.s.GetTask(h.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		last := d.Events[len(d.Events)-1]
		if last.ToState != "CANCELLED" || last.FromState == nil || !strings.HasPrefix(last.Actor, "cli:") || last.Reason == nil || *last.Reason != "run cancelled: wrong input" {
			t.Fatalf("audit row of %s: %+v", name, last)
		}
	}
	// The running task is signalled through its heartbeat.
	if st := h.state(running.ID); st != core.TaskRunning {
		t.Fatalf("slow is %s, want still RUNNING until its handler returns", st)
	}
	rr, err := h.s.Renew(h.ctx, running.ID, running.FencingToken, time.Minute)
	if err != nil || !rr.OK || !rr.Stop {
		t.Fatalf("heartbeat after cancel: %+v %v, want OK and Stop", rr, err)
	}

	// run show says why, in text and in JSON.
	if out := h.must("run", "show", runID.String()).stdout; !strings.Contains(out, ": wrong input\n") {
		t.Errorf("run show does not give the cancel reason:\n%s", out)
	}
	if out := h.must("run", "show", runID.String(), "-o", "json").stdout; !strings.Contains(out, `"cancel_reason": "wrong input"`) {
		t.Errorf("run show -o json lacks the cancel reason:\n%s", out)
	}

	// A second cancel is refused and changes nothing.
	before := h.snapshot()
	expect(t, h.ff("run", "cancel", runID.String(), "--reason", "again"), 1, "run already finished")
	h.assertUnchanged(before)
}

func TestRunCancelRefusesASucceededRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	runID := h.trigger("one")
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	before := h.snapshot()
	expect(t, h.ff("run", "cancel", runID.String(), "--reason", "again"), 1, "run already finished (it is SUCCEEDED)")
	h.assertUnchanged(before)
	expect(t, h.ff("run", "wait", runID.String()), 0)
}

// TestAnAmbiguousIDPrefixIsAUsageError: a prefix that two runs share is
// refused with exit 2, naming both, and changes nothing; one more
// character picks the run.
func TestAnAmbiguousIDPrefixIsAUsageError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	if _, err := h.db.ExecContext(h.ctx, `INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state)
SELECT v.id::uuid, w.id, 'one', 1, 'PENDING' FROM workflows w,
       (VALUES ('abcdef01-0000-4000-8000-000000000001'), ('abcdef02-0000-4000-8000-000000000002')) v(id)`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "show", "abcdef0"},
		{"run", "wait", "abcdef"},
		{"run", "cancel", "ABCDEF", "--reason", "r"},
		{"dead", "list", "--run", "abcdef0"},
	} {
		before := h.snapshot()
		r := h.ff(args...)
		expect(t, r, 2, "run id prefix", "is ambiguous: it matches abcdef01-0000-4000-8000-000000000001, abcdef02-0000-4000-8000-000000000002")
		if r.stdout != "" {
			t.Fatalf("%v: stdout %q", args, r.stdout)
		}
		h.assertUnchanged(before)
	}
	run := decode[runOut](t, h.must("run", "show", "abcdef02", "-o", "json").stdout)
	if run.ID != "abcdef02-0000-4000-8000-000000000002" {
		t.Fatalf("run show abcdef02: %+v", run)
	}
}

// TestRunShowAccountsForEveryTaskOfAFailedRun: a FAILED run's tasks
// downstream of its DEAD task show UPSTREAM_FAILED, and the run shows every
// task done (mode 46), as a table and as JSON.
func TestRunShowAccountsForEveryTaskOfAFailedRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(`
name: fivestep
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
  - {name: c, handler: fail, depends_on: [b]}
  - {name: d, handler: noop, depends_on: [c]}
  - {name: e, handler: noop, depends_on: [d]}
`)
	runID := h.trigger("fivestep")
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	h.succeed(h.taskID(runID, "b"))
	h.advance()
	h.kill(h.taskID(runID, "c"), "boom")
	h.advance()
	out := h.must("run", "show", runID.String()).stdout
	if !strings.Contains(out, "tasks     5/5 done") {
		t.Fatalf("run show does not count every task done:\n%s", out)
	}
	for _, n := range []string{"d", "e"} {
		if !regexp.MustCompile(`(?m)^\s+` + n + `\s+\S+\s+UPSTREAM_FAILED\s`).MatchString(out) {
			t.Fatalf("task %s is not shown UPSTREAM_FAILED:\n%s", n, out)
		}
	}
	got := decode[struct {
		State      string  `json:"state"`
		TasksTotal int     `json:"tasks_total"`
		TasksDone  int     `json:"tasks_done"`
		FinishedAt *string `json:"finished_at"`
		Tasks      []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"tasks"`
	}](t, h.must("run", "show", runID.String(), "-o", "json").stdout)
	if got.State != "FAILED" || got.FinishedAt == nil || got.TasksDone != 5 || got.TasksTotal != 5 {
		t.Fatalf("run show -o json: %+v", got)
	}
	states := map[string]string{}
	for _, tk := range got.Tasks {
		states[tk.Name] = tk.State
	}
	if states["c"] != "DEAD" || states["d"] != "UPSTREAM_FAILED" || states["e"] != "UPSTREAM_FAILED" {
		t.Fatalf("task states %v", states)
	}
}
