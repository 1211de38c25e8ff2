package cli_test

import (
	"os"
	"os/user"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

const pauseWF = "name: held\ntasks:\n  - {name: a, handler: noop}\n"

type pauseOut struct {
	Workflow string `json:"workflow"`
	Mode     string `json:"mode"`
	By       string `json:"by"`
	Reason   string `json:"reason"`
	Since    string `json:"since"`
	Dropped  int64  `json:"dropped"`
}

func TestWorkflowPauseAndResumeFromTheCommandLine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(pauseWF)
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	me := "cli:" + u.Username + "@" + host

	// Bad input: nothing written, exit 2 (unknown name: 1, naming it).
	before := h.snapshot()
	expect(t, h.ff("workflow", "pause", "held"), 2, "--reason is required: say why the workflow is paused (it is audited)")
	expect(t, h.ff("workflow", "pause", "held", "--reason", "x", "--mode", "later"), 2, `--mode: pause mode must be queue or drop, not "later"`)
	expect(t, h.ff("workflow", "pause", "--reason", "x"), 2, "workflow pause takes one workflow name")
	expect(t, h.ff("workflow", "pause", "Bad Name!", "--reason", "x"), 2, "workflow name")
	expect(t, h.ff("workflow", "pause", "nope", "--reason", "x"), 1, `pause workflow "nope": not found: no workflow is called "nope"`)
	expect(t, h.ff("workflow", "resume", "nope"), 1, `resume workflow "nope": not found: no workflow is called "nope"`)
	h.assertUnchanged(before)

	// Resume of a workflow that is not paused: a no-op that says so.
	if r := h.must("workflow", "resume", "held"); r.stdout != "workflow held is not paused; nothing to resume\n" {
		t.Fatalf("resume of a running workflow: %q", r.stdout)
	}
	h.assertUnchanged(before)

	out := decode[struct {
		Paused  pauseOut `json:"paused"`
		Changed bool     `json:"changed"`
	}](t, h.must("workflow", "pause", "held", "--reason", "warehouse migration", "-o", "json").stdout)
	if !out.Changed || out.Paused.Mode != "queue" || out.Paused.By != me || out.Paused.Reason != "warehouse migration" || out.Paused.Since == "" {
		t.Fatalf("pause -o json: %+v", out)
	}
	if r := h.must("workflow", "pause", "held", "--reason", "warehouse migration"); !strings.HasPrefix(r.stdout, "workflow held: already paused (mode queue) since ") {
		t.Fatalf("identical re-pause: %q", r.stdout)
	}

	// Mode queue: the run is created and says it is paused.
	runID := h.trigger("held")
	show := h.must("run", "show", runID.String()).stdout
	if !strings.Contains(show, "paused    paused since ") || !strings.Contains(show, " by "+me+` because "warehouse migration" (mode queue)`) {
		t.Fatalf("run show of a paused workflow's run:\n%s", show)
	}
	// A wait for it times out saying why it does not move.
	expect(t, h.ff("run", "wait", runID.String(), "--timeout", "300ms"), 1,
		"; its workflow is paused since ", ` because "warehouse migration" (mode queue`, "its tasks wait for `ffctl workflow resume held`; the run was not touched")
	js := decode[struct {
		Paused *pauseOut `json:"paused"`
	}](t, h.must("run", "show", runID.String(), "-o", "json").stdout)
	if js.Paused == nil || js.Paused.Reason != "warehouse migration" || js.Paused.Workflow != "held" {
		t.Fatalf("run show -o json: %+v", js.Paused)
	}
	list := decode[[]struct {
		Name   string    `json:"name"`
		Paused *pauseOut `json:"paused"`
	}](t, h.must("workflow", "list", "-o", "json").stdout)
	if len(list) != 1 || list[0].Paused == nil || list[0].Paused.Mode != "queue" {
		t.Fatalf("workflow list -o json: %+v", list)
	}
	if tbl := h.must("workflow", "list").stdout; !strings.Contains(tbl, "PAUSED") || !strings.Contains(tbl, `because "warehouse migration" (mode queue)`) {
		t.Fatalf("workflow list:\n%s", tbl)
	}

	// Mode drop: the trigger exits 3, nothing is created, the drop is counted.
	if r := h.must("workflow", "pause", "held", "--reason", "flood", "--mode", "drop"); !strings.HasPrefix(r.stdout, "workflow held: pause updated: mode drop") {
		t.Fatalf("re-pause with mode drop: %q", r.stdout)
	}
	before = h.snapshot()
	r := h.ff("run", "trigger", "held")
	expect(t, r, 3, `ffctl: trigger "held": workflow is paused (mode drop): the trigger was dropped (1 run(s) not created; `+"`ffctl workflow resume held` ends the pause)")
	if r.stdout != "" {
		t.Fatalf("a dropped trigger printed %q", r.stdout)
	}
	r = h.ffIn("{}\n{}\n", "run", "trigger", "held", "--runs-file", "-")
	expect(t, r, 3, "lines 1 to 2: trigger \"held\": workflow is paused (mode drop): the trigger was dropped (2 run(s) not created; `ffctl workflow resume held` ends the pause); 0 runs created (by the lines before line 1); once the pause ends, resume with --from-line 1")
	if strings.Count(r.stderr, "not created") != 1 {
		t.Fatalf("the bulk trigger's drop says it twice: %s", r.stderr)
	}
	var runs, dropped int
	h.db.QueryRowContext(h.ctx, `SELECT (SELECT count(*) FROM workflow_runs), (SELECT dropped FROM workflow_pauses)`).Scan(&runs, &dropped)
	if runs != 1 || dropped != 3 {
		t.Fatalf("after the dropped triggers: %d runs, %d dropped; want 1 and 3", runs, dropped)
	}
	if tbl := h.must("workflow", "list").stdout; !strings.Contains(tbl, "(mode drop, 3 dropped)") {
		t.Fatalf("workflow list:\n%s", tbl)
	}

	res := decode[struct {
		Resumed      bool  `json:"resumed"`
		Dropped      int64 `json:"dropped"`
		Redispatched int   `json:"redispatched"`
	}](t, h.must("workflow", "resume", "held", "--reason", "done", "-o", "json").stdout)
	if !res.Resumed || res.Dropped != 3 || res.Redispatched != 0 {
		t.Fatalf("resume -o json: %+v", res)
	}
	if show := h.must("run", "show", runID.String()).stdout; strings.Contains(show, "paused") {
		t.Fatalf("run show after the resume still says paused:\n%s", show)
	}
	var events string
	h.db.QueryRowContext(h.ctx, `SELECT string_agg(action || '/' || mode || '/' || reason || '/' || coalesce(dropped::text, '-') || '/' || (actor = $1)::text, ' ' ORDER BY id) FROM workflow_pause_events`, me).Scan(&events)
	if want := "pause/queue/warehouse migration/-/true pause/drop/flood/-/true resume/drop/done/3/true"; events != want {
		t.Fatalf("pause events %q, want %q", events, want)
	}
	if st := h.state(h.taskID(runID, "a")); st != core.TaskReady {
		t.Fatalf("the queued run's root is %s, want READY", st)
	}
}

// TestAPauseLineEscapesTheReasonOnceAndTheModeIgnoresCase: the mode is read
// whatever its case and spacing; a reason's control characters are shown
// escaped once (a new user's trial saw "evil\\x1b[2J" on the screen).
func TestAPauseLineEscapesTheReasonOnceAndTheModeIgnoresCase(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(pauseWF)
	h.must("workflow", "pause", "held", "--reason", "evil\x1b[2J\nnext", "--mode", " DROP ")
	out := h.must("workflow", "list").stdout
	if want := `because "evil\x1b[2J\nnext" (mode drop, 0 dropped)`; !strings.Contains(out, want) {
		t.Fatalf("workflow list lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "\x1b") {
		t.Fatalf("a raw escape reached the terminal: %q", out)
	}
}
