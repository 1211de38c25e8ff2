package cli_test

import (
	"os"
	"path/filepath"
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

func TestTriggerPrintsTheRunIDOrItsJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	r := h.must("run", "trigger", "twostep")
	if !uuidLine.MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("plain trigger output %q (stderr %q), want one run id", r.stdout, r.stderr)
	}
	pf := filepath.Join(t.TempDir(), "params.json")
	if err := os.WriteFile(pf, []byte(`{"date": "2026-11-30", "n": 3, "who": "file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Flags may follow the positional name; --param overrides the file.
	run := decode[runOut](t, h.must("run", "trigger", "twostep", "--params-file", pf, "--param", "who=flag", "--param", "x=a=b", "-o", "json").stdout)
	if run.Workflow != "twostep" || run.WorkflowVersion != 1 || run.State != "PENDING" || run.TasksTotal != 2 || len(run.Tasks) != 2 || run.Existing {
		t.Fatalf("trigger JSON: %+v", run)
	}
	if run.Params["date"] != "2026-11-30" || run.Params["n"] != float64(3) || run.Params["who"] != "flag" || run.Params["x"] != "a=b" {
		t.Fatalf("params: %v", run.Params)
	}
}

// TestAParamsFileThatBeginsWithAByteOrderMarkIsRead: the mark some
// editors write is not part of the JSON (a trial finding for runs files).
func TestAParamsFileThatBeginsWithAByteOrderMarkIsRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	pf := filepath.Join(t.TempDir(), "params.json")
	if err := os.WriteFile(pf, []byte("\uFEFF"+`{"date": "2026-11-30"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := decode[runOut](t, h.must("run", "trigger", "twostep", "--params-file", pf, "-o", "json").stdout)
	if len(run.Params) != 1 || run.Params["date"] != "2026-11-30" {
		t.Fatalf("params: %v", run.Params)
	}
}

func TestTriggerIdempotencyKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	first := decode[runOut](t, h.must("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-11-30", "-o", "json").stdout)
	if first.IdempotencyKey == nil || *first.IdempotencyKey != "nightly-2026-11-30" || first.Existing {
		t.Fatalf("first trigger: %+v", first)
	}

	// The same key and params: the existing run, exit 0, and it says so.
	before := h.snapshot()
	r := h.must("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-11-30", "-o", "json")
	again := decode[runOut](t, r.stdout)
	if again.ID != first.ID || !again.Existing {
		t.Fatalf("repeat trigger: %+v, want run %s with existing=true", again, first.ID)
	}
	if !strings.Contains(r.stderr, `idempotency key "nightly-2026-11-30" already used with the same params: returning existing run `+first.ID) {
		t.Fatalf("repeat trigger does not say it returned the existing run: %s", r)
	}
	r = h.must("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-11-30")
	if r.stdout != first.ID+"\n" {
		t.Fatalf("plain repeat trigger printed %q, want %s", r.stdout, first.ID)
	}
	h.assertUnchanged(before)

	// The same key with other params: refused, exit 1, nothing written.
	r = h.ff("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-12-01")
	expect(t, r, 1, "conflict", `idempotency key "nightly-2026-11-30" already belongs to run `+first.ID, "different params")
	if r.stdout != "" {
		t.Fatalf("refused trigger printed %q", r.stdout)
	}
	h.assertUnchanged(before)
}

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
		!strings.Contains(lines[1], "  other     PENDING  0/1    ") {
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

// waitResult is the outcome of an ffctl invocation running in the
// background.
func (h *harness) background(args ...string) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- h.ff(args...) }()
	return ch
}

func TestRunWaitFollowsTheRunToSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	runID := h.trigger("twostep")
	done := h.background("run", "wait", runID.String(), "--timeout", "60s", "-o", "json")
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	b := h.taskID(runID, "b")
	h.succeed(b)
	h.advance()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("run wait did not return after the run SUCCEEDED")
	}
	if r.code != 0 {
		t.Fatalf("run wait: %s", r)
	}
	if run := decode[runOut](t, r.stdout); run.State != "SUCCEEDED" || run.TasksDone != 2 {
		t.Fatalf("run wait JSON: %+v", run)
	}
	if r.stderr != "" {
		t.Fatalf("run wait is not quiet when piped: %q", r.stderr)
	}
}

func TestTriggerWaitExitsOneWhenTheRunFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	done := h.background("run", "trigger", "twostep", "--wait", "--timeout", "60s")
	var runID uuid.UUID
	eventually(t, 10*time.Second, "the triggered run", func() bool {
		var id string
		if err := h.db.QueryRowContext(h.ctx, `SELECT id FROM workflow_runs`).Scan(&id); err != nil {
			return false
		}
		runID = uuid.MustParse(id)
		return true
	})
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	h.kill(h.taskID(runID, "b"), "upstream said no")
	h.advance()
	r := <-done
	expect(t, r, 1, "run "+runID.String()+" ended FAILED")
	// The whole run id comes first, before the wait (issue 11).
	if !strings.HasPrefix(r.stderr, "run "+runID.String()+" triggered; waiting for it to end (ctrl-C stops waiting, not the run)\n") {
		t.Fatalf("trigger --wait does not name the run before waiting:\n%s", r)
	}
	if !strings.Contains(r.stdout, "state     FAILED") || !strings.Contains(r.stdout, "upstream said no") {
		t.Fatalf("trigger --wait output:\n%s", r)
	}
}

func TestRunWaitWaitsUntilAFailedRunSettles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: pair\ntasks:\n  - {name: bad, handler: fail}\n  - {name: good, handler: noop}\n")
	runID := h.trigger("pair")
	h.kill(h.taskID(runID, "bad"), "nope")
	h.advance()
	if r := h.run(runID); r.State != "FAILED" || r.FinishedAt != nil {
		t.Fatalf("run %s finished %v, want FAILED and still open (good is READY)", r.State, r.FinishedAt)
	}
	// FAILED but not ended: "good" may still run.
	r := h.ff("run", "wait", runID.String(), "--timeout", "500ms")
	expect(t, r, 1, "timed out after 500ms waiting for run "+runID.String()+" (state FAILED, 1/2 tasks done)")
	h.succeed(h.taskID(runID, "good"))
	h.advance()
	r = h.ff("run", "wait", runID.String(), "--timeout", "30s")
	expect(t, r, 1, "ended FAILED")
}

func TestRunWaitTimeoutLeavesTheRunAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	runID := h.trigger("twostep")
	before := h.snapshot()
	start := time.Now()
	r := h.ff("run", "wait", runID.String(), "--timeout", "250ms", "-o", "json")
	expect(t, r, 1, "timed out after 250ms waiting for run "+runID.String(), "the run was not touched")
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("--timeout 250ms took %s", el)
	}
	if r.stdout != "" {
		t.Fatalf("timed-out wait printed %q", r.stdout)
	}
	h.assertUnchanged(before)
	// trigger --wait times out the same way, after creating its run.
	r = h.ff("run", "trigger", "twostep", "--wait", "--timeout", "200ms")
	expect(t, r, 1, "timed out after 200ms", "the run was not touched")
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
