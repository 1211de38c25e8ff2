package cli_test

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// TestWorkflowApplyChecksBuiltinParamsAndLiveHandlers: a typo in a built-in
// handler's params is refused at apply (exit 2, nothing stored); a handler
// no live worker registers is a warning when no worker has been seen, and
// --strict makes it an error (exit 1, nothing stored); with live workers
// and --allow-unknown-handler it is a warning naming what they register.
func TestWorkflowApplyChecksBuiltinParamsAndLiveHandlers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	bad := []struct{ name, src, want string }{
		{"sleep typo", "name: w\ntasks:\n  - {name: a, handler: sleep, params: {durration: 1s}}\n", `task a: handler sleep: params: json: unknown field "durration"`},
		{"sleep bad value", "name: w\ntasks:\n  - {name: a, handler: sleep, params: {duration: soon}}\n", "task a: handler sleep: params:"},
		{"fail wrong type", "name: w\ntasks:\n  - {name: a, handler: fail, params: {times: two}}\n", "task a: handler fail: params:"},
		{"noop with params", "name: w\ntasks:\n  - {name: a, handler: noop, params: {x: 1}}\n", `unknown field "x"`},
		{"shell without command", "name: w\ntasks:\n  - {name: a, handler: shell, params: {dir: /tmp}}\n", "params.command is required"},
		{"http not a url", "name: w\ntasks:\n  - {name: a, handler: http, params: {url: example.com}}\n", "is not an http(s) URL"},
	}
	before := h.snapshot()
	for _, c := range bad {
		r := h.ffIn(c.src, "workflow", "apply", "-f", "-")
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: want exit 2 naming %q, got %s", c.name, c.want, r)
		}
	}
	h.assertUnchanged(before)

	const sendmail = "name: mail\ntasks:\n  - {name: send, handler: sendmail}\n  - {name: nap, handler: sleep, params: {duration: 1ms}}\n"
	// No worker seen: --strict refuses, writing nothing.
	r := h.ffIn(sendmail, "workflow", "apply", "-f", "-", "--strict")
	if r.code != 1 || !strings.Contains(r.stderr, "handler sendmail (task send): no worker has been seen") {
		t.Fatalf("strict apply with no worker: %s", r)
	}
	h.assertUnchanged(before)

	// Live workers, --allow-unknown-handler: the warning names their
	// handlers; apply succeeds.
	if err := h.s.RecordPresence(h.ctx, store.Presence{ID: "w1", Role: "worker", Hostname: "h", PID: 1, Handlers: []string{"noop", "sleep"}, Queue: "flowforge.dispatch"}); err != nil {
		t.Fatal(err)
	}
	if err := h.s.RecordPresence(h.ctx, store.Presence{ID: "s1", Role: "scheduler", Hostname: "h", PID: 2}); err != nil {
		t.Fatal(err)
	}
	r = h.ffIn(sendmail, "workflow", "apply", "-f", "-", "--allow-unknown-handler")
	if r.code != 0 || !strings.Contains(r.stdout, "stored version 1") {
		t.Fatalf("apply: %s", r)
	}
	want := "warning: handler sendmail (task send): none of the 1 workers seen in the last 10 min registers it; they register: noop, sleep"
	if !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "handler sleep") {
		t.Fatalf("stderr does not warn (only) about sendmail naming the live handlers:\n%s", r.stderr)
	}
	// A handler a live worker registers: no warning.
	r = h.ffIn("name: nap\ntasks:\n  - {name: nap, handler: sleep, params: {duration: 1ms}}\n", "workflow", "apply", "-f", "-", "--strict", "-o", "json")
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, `"warnings": []`) {
		t.Fatalf("apply of a served handler: %s", r)
	}
	r = h.ffIn(sendmail, "workflow", "apply", "-f", "-", "--strict", "--allow-unknown-handler")
	expect(t, r, 2, "ffctl: workflow apply: --strict and --allow-unknown-handler contradict each other: give one\n")
}

// TestRunShowSaysATaskWaitsForAWorkerWithItsHandler: once a worker noted
// that it handed a READY task back for want of its handler, `run show`
// says so (table and JSON); a new attempt (another fencing token) clears
// it until a worker notes it again.
func TestRunShowSaysATaskWaitsForAWorkerWithItsHandler(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: mail\ntasks:\n  - {name: send, handler: sendmail}\n")
	run := h.trigger("mail")
	task := h.run(run).Tasks[0]
	if task.State != "READY" || task.WaitingForHandler != nil {
		t.Fatalf("task %s waiting %v, want READY and not waiting", task.State, task.WaitingForHandler)
	}
	for i, wantWrote := range []bool{true, false} { // once per task and token, from any worker
		wrote, err := h.s.NoteWaitingForHandler(h.ctx, task.ID, task.FencingToken, "w"+string(rune('1'+i)), "sendmail", "noop, sleep")
		if err != nil || wrote != wantWrote {
			t.Fatalf("note %d: wrote %v, %v; want %v", i, wrote, err, wantWrote)
		}
	}
	if wrote, err := h.s.NoteWaitingForHandler(h.ctx, task.ID, task.FencingToken+1, "w1", "sendmail", "[]"); err != nil || wrote {
		t.Fatalf("note at a stale token: wrote %v, %v", wrote, err)
	}
	r := h.must("run", "show", run.String())
	if !strings.Contains(r.stdout, "waiting for a worker with handler sendmail") {
		t.Fatalf("run show does not say what the task waits for:\n%s", r.stdout)
	}
	r = h.must("run", "show", run.String(), "-o", "json")
	if !strings.Contains(r.stdout, `"waiting_for_handler": "sendmail"`) {
		t.Fatalf("run show -o json lacks waiting_for_handler:\n%s", r.stdout)
	}
	hist := h.must("task", "show", task.ID.String(), "-o", "json")
	if !strings.Contains(hist.stdout, `"reason": "waiting for a worker with handler sendmail (handed back by w1, which registers noop, sleep)"`) {
		t.Fatalf("task history lacks the note:\n%s", hist.stdout)
	}
}

// liveWorker records a worker process seen now that registers handlers.
func (h *harness) liveWorker(id string, handlers ...string) {
	h.t.Helper()
	if err := h.s.RecordPresence(h.ctx, store.Presence{ID: id, Role: "worker", Hostname: "h", PID: 1, Handlers: handlers, Queue: "flowforge.dispatch"}); err != nil {
		h.t.Fatal(err)
	}
}

// TestWorkflowApplyRefusesAHandlerNoLiveWorkerRegisters (issue 23, hazard
// 1): while live workers exist, a file naming a handler none of them
// registers (a typo) is refused: exit 2, nothing stored (the newest
// version stays the one before), the message naming the task, the handler
// and what the live workers register. --allow-unknown-handler stores it
// with the warning; with no live worker at all it is a warning (exit 0).
func TestWorkflowApplyRefusesAHandlerNoLiveWorkerRegisters(t *testing.T) {
	t.Parallel()
	const good = "name: mail\ntasks:\n  - {name: send, handler: noop}\n  - {name: nap, handler: sleep, params: {duration: 1ms}}\n"
	const typo = "name: mail\ntasks:\n  - {name: send, handler: nop}\n  - {name: nap, handler: sleep, params: {duration: 1ms}}\n"
	h := newHarness(t)
	h.liveWorker("w1", "noop", "sleep")
	h.liveWorker("w2", "noop", "http")
	h.apply(good)

	before := h.snapshot()
	r := h.ffIn(typo, "workflow", "apply", "-f", "-")
	expect(t, r, 2, "ffctl: -: task send: handler nop is registered by none of the 2 workers seen in the last 10 min (they register: http, noop, sleep); nothing stored: fix the handler name, start a worker that registers it, or pass --allow-unknown-handler to store it anyway\n")
	if r.stdout != "" {
		t.Errorf("a refused apply wrote to stdout:\n%s", r.stdout)
	}
	h.assertUnchanged(before)
	if wf, err := h.s.GetWorkflow(h.ctx, "mail", 0); err != nil || wf.Version != 1 {
		t.Fatalf("newest version after the refusal: %d, %v; want 1", wf.Version, err)
	}

	// Several: each named with its tasks, shell with what workers need.
	r = h.ffIn("name: many\ntasks:\n  - {name: a, handler: x}\n  - {name: b, handler: x}\n  - {name: c, handler: shell, params: {command: [\"true\"]}}\n", "workflow", "apply", "-f", "-")
	expect(t, r, 2, "ffctl: -: tasks a, b: handler x; task c: handler shell (workers register shell only with --allow-shell) are registered by none of the 2 workers seen in the last 10 min (they register: http, noop, sleep); nothing stored")
	h.assertUnchanged(before)

	// --strict does not turn the refusal into a failure (exit 1).
	expect(t, h.ffIn(typo, "workflow", "apply", "-f", "-", "--strict"), 2, "task send: handler nop is registered by none of the 2 workers")
	h.assertUnchanged(before)

	r = h.ffIn(typo, "workflow", "apply", "-f", "-", "--allow-unknown-handler")
	if r.code != 0 || !strings.Contains(r.stdout, "workflow mail: stored version 2 (2 tasks)") ||
		!strings.Contains(r.stderr, "warning: handler nop (task send): none of the 2 workers seen in the last 10 min registers it; they register: http, noop, sleep") {
		t.Fatalf("apply --allow-unknown-handler: %s", r)
	}

	// No live worker at all: a warning, as before.
	lone := newHarness(t)
	r = lone.ffIn(typo, "workflow", "apply", "-f", "-")
	if r.code != 0 || !strings.Contains(r.stdout, "stored version 1") ||
		!strings.Contains(r.stderr, "warning: handler nop (task send): no worker has been seen in the last 10 min") {
		t.Fatalf("apply with no live worker: %s", r)
	}
}
