package cli_test

import (
	"os"
	"os/user"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

type requeueOut struct {
	ID       string `json:"id"`
	Requeued bool   `json:"requeued"`
	Error    string `json:"error"`
}

func TestDeadListFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID, dead := h.deadRun()
	h.apply("name: solo\ntasks:\n  - {name: only, handler: fail}\n")
	other := h.trigger("solo")
	h.kill(h.taskID(other, "only"), "nope")

	type deadOut struct {
		ID          string  `json:"id"`
		RunID       string  `json:"run_id"`
		Workflow    string  `json:"workflow"`
		Name        string  `json:"name"`
		State       string  `json:"state"`
		Attempt     int     `json:"attempt"`
		MaxAttempts int     `json:"max_attempts"`
		Error       *string `json:"error"`
		FinishedAt  *string `json:"finished_at"`
	}
	all := decode[[]deadOut](t, h.must("dead", "list", "-o", "json").stdout)
	if len(all) != 2 {
		t.Fatalf("dead list: %+v", all)
	}
	byWF := decode[[]deadOut](t, h.must("dead", "list", "--workflow", "twostep", "-o", "json").stdout)
	if len(byWF) != 1 || byWF[0].ID != dead.String() || byWF[0].RunID != runID.String() || byWF[0].Workflow != "twostep" ||
		byWF[0].Name != "b" || byWF[0].State != "DEAD" || byWF[0].Error == nil || *byWF[0].Error != "boom" || byWF[0].FinishedAt == nil {
		t.Fatalf("dead list --workflow: %+v", byWF)
	}
	byRun := decode[[]deadOut](t, h.must("dead", "list", "--run", other.String(), "-o", "json").stdout)
	if len(byRun) != 1 || byRun[0].Workflow != "solo" {
		t.Fatalf("dead list --run: %+v", byRun)
	}
	if old := h.must("dead", "list", "--older-than", "1h", "-o", "json").stdout; old != "[]\n" {
		t.Fatalf("dead list --older-than 1h: %q, want []", old)
	}
	if _, err := h.db.ExecContext(h.ctx, `UPDATE task_runs SET finished_at = now() - interval '2 hours' WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	old := decode[[]deadOut](t, h.must("dead", "list", "--older-than", "1h", "-o", "json").stdout)
	if len(old) != 1 || old[0].ID != dead.String() {
		t.Fatalf("dead list --older-than 1h after ageing: %+v", old)
	}
	// Ages in days (issue 11: --older-than 3d was refused), measured on
	// the database clock.
	if _, err := h.db.ExecContext(h.ctx, `UPDATE task_runs SET finished_at = now() - interval '3 days 1 hour' WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		age  string
		want int
	}{{"3d", 1}, {"1d12h", 1}, {"3d2h", 0}, {"1.5d", 1}, {"4d", 0}, {"73h", 1}} {
		got := decode[[]deadOut](t, h.must("dead", "list", "--older-than", tc.age, "-o", "json").stdout)
		if len(got) != tc.want || (tc.want == 1 && got[0].ID != dead.String()) {
			t.Errorf("dead list --older-than %s: %+v, want %d task(s)", tc.age, got, tc.want)
		}
	}
	// The same parser serves dead requeue --all (nothing is that old).
	if r := h.must("dead", "requeue", "--all", "--older-than", "30d", "--reason", "r", "--yes", "-o", "json"); r.stdout != "[]\n" {
		t.Fatalf("dead requeue --all --older-than 30d: %s", r)
	}
	// A run id prefix (the dashboard shows eight characters) filters too.
	if byPrefix := decode[[]deadOut](t, h.must("dead", "list", "--run", other.String()[:8], "-o", "json").stdout); len(byPrefix) != 1 || byPrefix[0].Workflow != "solo" {
		t.Fatalf("dead list --run PREFIX: %+v", byPrefix)
	}
	if one := decode[[]deadOut](t, h.must("dead", "list", "--limit", "1", "-o", "json").stdout); len(one) != 1 {
		t.Fatalf("--limit 1: %d rows", len(one))
	}
	table := h.must("dead", "list", "--workflow", "solo").stdout
	if !strings.HasPrefix(table, "TASK ID  ") || !strings.Contains(table, "  solo      only  DEAD   1/3       ") {
		t.Fatalf("dead list table:\n%s", table)
	}
}

func TestDeadRequeueIsAuditedAndResetsTheTask(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID, dead := h.deadRun()
	before, err := h.s.GetTask(h.ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	r := h.must("dead", "requeue", dead.String(), "--reason", "upstream fixed", "-o", "json")
	res := decode[[]requeueOut](t, r.stdout)
	if len(res) != 1 || res[0].ID != dead.String() || !res[0].Requeued || res[0].Error != "" {
		t.Fatalf("requeue JSON: %+v", res)
	}
	after, err := h.s.GetTask(h.ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != "PENDING" || after.Attempt != 0 || after.FencingToken != before.FencingToken+1 || after.FinishedAt != nil {
		t.Fatalf("requeued task: state %s attempt %d token %d (was %d) finished %v", after.State, after.Attempt, after.FencingToken, before.FencingToken, after.FinishedAt)
	}
	ev := after.Events[len(after.Events)-1]
	host, _ := os.Hostname()
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if ev.FromState == nil || *ev.FromState != "DEAD" || ev.ToState != "PENDING" || ev.Actor != "cli:"+me.Username+"@"+host ||
		ev.Reason == nil || *ev.Reason != "upstream fixed" || ev.At.IsZero() {
		t.Fatalf("audit row: %+v", ev)
	}
	if run := h.run(runID); run.FinishedAt != nil {
		t.Fatal("the requeue did not reopen the run")
	}
	// The task show of a requeued task lists the audit row.
	out := h.must("task", "show", dead.String()).stdout
	if !regexp.MustCompile(`DEAD +PENDING +0 +\d+ +cli:\S+ +upstream fixed`).MatchString(out) {
		t.Fatalf("task show after requeue:\n%s", out)
	}
	// Plain output.
	h.advance()
	h.kill(dead, "again")
	r = h.must("dead", "requeue", dead.String(), "--reason", "second try")
	if r.stdout != "requeued "+dead.String()+"\n" {
		t.Fatalf("plain requeue output %q", r.stdout)
	}
}

func TestDeadRequeueRefusesWhatIsNotDead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: mix\ntasks:\n  - {name: done, handler: noop}\n  - {name: busy, handler: noop}\n  - {name: waiting, handler: noop, depends_on: [busy]}\n  - {name: queued, handler: noop}\n")
	runID := h.trigger("mix")
	h.succeed(h.taskID(runID, "done"))
	h.claim(h.taskID(runID, "busy"), "w1")
	cases := map[string]core.TaskState{"done": core.TaskSucceeded, "busy": core.TaskRunning, "waiting": core.TaskPending, "queued": core.TaskReady}
	for name, state := range cases {
		t.Run(string(state), func(t *testing.T) {
			id := h.taskID(runID, name)
			before := h.snapshot()
			r := h.ff("dead", "requeue", id.String(), "--reason", "try", "-o", "json")
			expect(t, r, 1, "1 of 1 tasks not requeued")
			res := decode[[]requeueOut](t, r.stdout)
			if len(res) != 1 || res[0].Requeued || !strings.Contains(res[0].Error, "task is not DEAD (it is "+string(state)+")") {
				t.Fatalf("requeue of a %s task: %+v", state, res)
			}
			h.assertUnchanged(before)
			if st := h.state(id); st != state {
				t.Fatalf("%s is %s after a refused requeue", name, st)
			}
		})
	}
	// Plain output names the reason on stderr.
	r := h.ff("dead", "requeue", h.taskID(runID, "done").String(), "--reason", "try")
	expect(t, r, 1, "not requeued: task ", "task is not DEAD (it is SUCCEEDED)")
	// ... in one line (issue 11: a refused requeue printed the reason and
	// then "1 of 1 tasks not requeued").
	if n := strings.Count(r.stderr, "\n"); n != 1 || r.stdout != "" {
		t.Fatalf("a refused requeue printed %d lines on stderr, want 1\n%s", n, r)
	}
	// Two refused tasks: a line each, then the count.
	r = h.ff("dead", "requeue", h.taskID(runID, "done").String(), h.taskID(runID, "queued").String(), "--reason", "try")
	expect(t, r, 1, "2 of 2 tasks not requeued")
	if n := strings.Count(r.stderr, "\n"); n != 3 {
		t.Fatalf("two refused requeues printed %d lines on stderr, want 3\n%s", n, r)
	}
	// Each is an error line like any other: it starts "ffctl: " (a new
	// user's trial found the per-task lines without it).
	for _, line := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
		if !strings.HasPrefix(line, "ffctl: ") {
			t.Errorf("stderr line %q does not start with \"ffctl: \"", line)
		}
	}
}

func TestDeadRequeueOfACancelledRunIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID, dead := h.deadRun()
	h.must("run", "cancel", runID.String(), "--reason", "give up")
	before := h.snapshot()
	expect(t, h.ff("dead", "requeue", dead.String(), "--reason", "r"), 1, "its run was cancelled")
	h.assertUnchanged(before)
	// --all skips it: there is nothing to requeue.
	r := h.must("dead", "requeue", "--all", "--reason", "r", "--yes", "-o", "json")
	if r.stdout != "[]\n" {
		t.Fatalf("--all with only a cancelled run's task: %q", r.stdout)
	}
	h.assertUnchanged(before)
}

func TestConcurrentRequeuesOfOneTaskExactlyOneWins(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, dead := h.deadRun()
	const n = 10
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = h.ff("dead", "requeue", dead.String(), "--reason", "race")
		}()
	}
	close(start)
	wg.Wait()
	wins := 0
	for _, r := range results {
		switch r.code {
		case 0:
			wins++
		case 1:
			if !strings.Contains(r.stderr, "task is not DEAD (it is PENDING)") {
				t.Errorf("a losing requeue says: %s", r)
			}
		default:
			t.Errorf("unexpected exit: %s", r)
		}
	}
	if wins != 1 {
		t.Fatalf("%d requeues won, want exactly 1", wins)
	}
	var audits int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM task_events WHERE task_run_id = $1 AND from_state = 'DEAD' AND to_state = 'PENDING'`, dead).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	if audits != 1 {
		t.Fatalf("%d audit rows, want 1", audits)
	}
}

func TestDeadRequeueAll(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	run1, dead1 := h.deadRun()
	run2 := h.trigger("twostep")
	h.succeed(h.taskID(run2, "a"))
	h.advance()
	dead2 := h.taskID(run2, "b")
	h.kill(dead2, "boom")
	h.apply("name: solo\ntasks:\n  - {name: only, handler: fail}\n")
	run3 := h.trigger("solo")
	dead3 := h.taskID(run3, "only")
	h.kill(dead3, "nope")

	// --all --run: only that run's DEAD tasks.
	res := decode[[]requeueOut](t, h.must("dead", "requeue", "--all", "--run", run1.String(), "--reason", "one run", "--yes", "-o", "json").stdout)
	if len(res) != 1 || res[0].ID != dead1.String() || !res[0].Requeued {
		t.Fatalf("--all --run: %+v", res)
	}
	// --all --workflow: that workflow's.
	res = decode[[]requeueOut](t, h.must("dead", "requeue", "--all", "--workflow", "twostep", "--reason", "wf", "--yes", "-o", "json").stdout)
	if len(res) != 1 || res[0].ID != dead2.String() {
		t.Fatalf("--all --workflow: %+v", res)
	}
	if st := h.state(dead3); st != core.TaskDead {
		t.Fatalf("a task of another workflow was requeued: %s", st)
	}
	// --all: everything left.
	r := h.must("dead", "requeue", "--all", "--reason", "all", "--yes")
	if r.stdout != "requeued "+dead3.String()+"\n" {
		t.Fatalf("--all plain output %q", r.stdout)
	}
	for _, id := range []uuid.UUID{dead1, dead2, dead3} {
		if st := h.state(id); st != core.TaskPending {
			t.Fatalf("task %s is %s, want PENDING", id, st)
		}
	}
	// Nothing left: exit 0, says so.
	r = h.must("dead", "requeue", "--all", "--reason", "all", "--yes")
	if r.stdout != "" || !strings.Contains(r.stderr, "no DEAD tasks to requeue") {
		t.Fatalf("--all with nothing DEAD: %s", r)
	}
}

func TestTaskShowListsEveryAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: flaky\ntasks:\n  - {name: f, handler: fail, retry: {max_attempts: 3, initial_backoff: 1ms, max_backoff: 1ms}}\n")
	runID := h.trigger("flaky")
	id := h.taskID(runID, "f")
	c1 := h.claim(id, "worker-one")
	if st := h.finish(c1, store.OutcomeFailed, "first failure", false); st != core.TaskRetrying {
		t.Fatalf("after attempt 1: %s", st)
	}
	eventually(t, 10*time.Second, "the retry to be promoted", func() bool {
		h.advance()
		return h.state(id) == core.TaskReady
	})
	c2 := h.claim(id, "worker-two")
	h.finish(c2, store.OutcomeSucceeded, "", false)

	type attemptOut struct {
		Attempt      int     `json:"attempt"`
		WorkerID     *string `json:"worker_id"`
		FencingToken int64   `json:"fencing_token"`
		StartedAt    string  `json:"started_at"`
		FinishedAt   *string `json:"finished_at"`
		Outcome      string  `json:"outcome"`
		Error        *string `json:"error"`
	}
	out := decode[struct {
		ID       string       `json:"id"`
		RunID    string       `json:"run_id"`
		Name     string       `json:"name"`
		State    string       `json:"state"`
		Workflow string       `json:"workflow"`
		Attempts []attemptOut `json:"attempts"`
		Events   []struct {
			From  *string `json:"from_state"`
			To    string  `json:"to_state"`
			Actor string  `json:"actor"`
		} `json:"events"`
	}](t, h.must("task", "show", id.String(), "-o", "json").stdout)
	if out.ID != id.String() || out.RunID != runID.String() || out.Name != "f" || out.State != "SUCCEEDED" || out.Workflow != "flaky" {
		t.Fatalf("task show: %+v", out)
	}
	if len(out.Attempts) != 2 {
		t.Fatalf("attempts: %+v", out.Attempts)
	}
	a1, a2 := out.Attempts[0], out.Attempts[1]
	if a1.Attempt != 1 || *a1.WorkerID != "worker-one" || a1.FencingToken != c1.FencingToken || a1.FinishedAt == nil ||
		a1.Outcome != "RETRYING" || a1.Error == nil || *a1.Error != "first failure" || a1.StartedAt == "" {
		t.Fatalf("attempt 1: %+v", a1)
	}
	if a2.Attempt != 2 || *a2.WorkerID != "worker-two" || a2.FencingToken != c2.FencingToken || a2.Outcome != "SUCCEEDED" || a2.Error != nil {
		t.Fatalf("attempt 2: %+v", a2)
	}
	if len(out.Events) < 4 {
		t.Fatalf("events: %+v", out.Events)
	}
	table := h.must("task", "show", id.String()).stdout
	for _, want := range []string{"ATTEMPTS\nATTEMPT  WORKER      TOKEN  STARTED", "1        worker-one  ", "RETRYING   first failure", "2        worker-two  ", "SUCCEEDED  -", "HISTORY\nAT  "} {
		if !strings.Contains(table, want) {
			t.Fatalf("task show table lacks %q:\n%s", want, table)
		}
	}
}

const failFastPair = `
name: ffpair
fail_fast: true
tasks:
  - {name: x, handler: fail}
  - {name: y, handler: fail}
  - {name: after, handler: noop, depends_on: [x]}
  - {name: sibling, handler: noop}
`

// failFastPairRun returns a run of failFastPair whose x and y are DEAD,
// whose after is UPSTREAM_FAILED and whose sibling fail_fast cancelled, and
// its task ids by name.
func (h *harness) failFastPairRun() (uuid.UUID, map[string]uuid.UUID) {
	h.t.Helper()
	runID := h.trigger("ffpair")
	ids := map[string]uuid.UUID{}
	for _, n := range []string{"x", "y", "after", "sibling"} {
		ids[n] = h.taskID(runID, n)
	}
	h.kill(ids["x"], "boom x")
	h.kill(ids["y"], "boom y")
	h.advance()
	if st := h.state(ids["after"]); st != core.TaskUpstreamFailed {
		h.t.Fatalf("after is %s, want UPSTREAM_FAILED (x is DEAD)", st)
	}
	if st := h.state(ids["sibling"]); st != core.TaskCancelled {
		h.t.Fatalf("sibling is %s, want CANCELLED by fail_fast", st)
	}
	return runID, ids
}

// TestDeadRequeueLeavesAFailFastRunRunnable: `dead requeue --all --run R`
// on a fail_fast run with two DEAD tasks, and `dead requeue ID` of one of
// them, leave the run runnable: no task is cancelled again by the next
// scheduler pass, the tasks fail_fast cancelled are back, and the run
// reaches SUCCEEDED.
func TestDeadRequeueLeavesAFailFastRunRunnable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(failFastPair)
	type jsonOut struct {
		ID       string   `json:"id"`
		Requeued bool     `json:"requeued"`
		Error    string   `json:"error"`
		Also     []string `json:"also_requeued"`
		With     string   `json:"requeued_with"`
	}
	for _, tc := range []struct {
		name string
		args func(runID uuid.UUID, ids map[string]uuid.UUID) []string
		want func(t *testing.T, ids map[string]uuid.UUID, r result)
	}{
		{
			name: "--all --run",
			args: func(runID uuid.UUID, _ map[string]uuid.UUID) []string {
				return []string{"dead", "requeue", "--all", "--run", runID.String(), "--reason", "fixed", "--yes", "-o", "json"}
			},
			want: func(t *testing.T, ids map[string]uuid.UUID, r result) {
				res := decode[[]jsonOut](t, r.stdout)
				if len(res) != 2 || !res[0].Requeued || !res[1].Requeued || len(res[0].Also) != 3 || res[1].With != res[0].ID {
					t.Fatalf("dead requeue --all --run: %+v", res)
				}
			},
		},
		{
			name: "one id",
			args: func(_ uuid.UUID, ids map[string]uuid.UUID) []string {
				return []string{"dead", "requeue", ids["y"].String(), "--reason", "fixed"}
			},
			want: func(t *testing.T, ids map[string]uuid.UUID, r result) {
				if want := "requeued " + ids["y"].String() + " and 3 other task(s) of its run\n"; r.stdout != want {
					t.Fatalf("dead requeue ID: %q, want %q", r.stdout, want)
				}
			},
		},
	} {
		runID, ids := h.failFastPairRun()
		r := h.must(tc.args(runID, ids)...)
		h.advance()
		for n, want := range map[string]core.TaskState{"x": core.TaskReady, "y": core.TaskReady, "sibling": core.TaskReady, "after": core.TaskPending} {
			if st := h.state(ids[n]); st != want {
				t.Fatalf("%s: after the requeue and a scheduler pass %s is %s, want %s", tc.name, n, st, want)
			}
		}
		tc.want(t, ids, r)
		for _, n := range []string{"x", "y", "sibling"} {
			h.succeed(ids[n])
		}
		h.advance()
		h.succeed(ids["after"])
		h.advance()
		if r := h.run(runID); r.State != "SUCCEEDED" {
			t.Fatalf("%s: the requeued fail_fast run is %s, want SUCCEEDED", tc.name, r.State)
		}
	}
}
