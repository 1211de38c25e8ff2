package cli_test

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// TestWorkflowApplyChecksBuiltinParamsAndLiveHandlers: a typo in a built-in
// handler's params is refused at apply (exit 2, nothing stored); a handler
// no live worker registers is a warning naming what the live workers do
// register, and --strict makes it an error (exit 1, nothing stored).
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

	// Live workers: the warning names their handlers; apply succeeds.
	if err := h.s.RecordPresence(h.ctx, store.Presence{ID: "w1", Role: "worker", Hostname: "h", PID: 1, Handlers: []string{"noop", "sleep"}, Queue: "flowforge.dispatch"}); err != nil {
		t.Fatal(err)
	}
	if err := h.s.RecordPresence(h.ctx, store.Presence{ID: "s1", Role: "scheduler", Hostname: "h", PID: 2}); err != nil {
		t.Fatal(err)
	}
	r = h.ffIn(sendmail, "workflow", "apply", "-f", "-")
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
