package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// startStack runs scheduler, publisher and the given number of workers as
// separate ffctl processes.
func startStack(t *testing.T, s *harness.Stack, workers int, workerArgs ...string) {
	t.Helper()
	s.ControlPlane(t)
	for i := 0; i < workers; i++ {
		s.Daemon(t, "worker-"+string(rune('a'+i)), "worker", workerArgs...)
	}
}

const diamondYAML = `
name: diamond
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: sleep, params: {duration: 50ms}, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [a]}
  - {name: d, handler: noop, depends_on: [b, c]}
`

func TestDAGRunSucceedsThroughSeparateProcesses(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	startStack(t, s, 1)
	s.Apply(t, diamondYAML)
	id := s.Trigger(t, "diamond")
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run state = %s, want SUCCEEDED: %+v", r.State, r.Tasks)
	}
	for _, task := range r.Tasks {
		if task.State != "SUCCEEDED" || task.Attempt != 1 {
			t.Errorf("task %s: state %s attempt %d, want SUCCEEDED attempt 1", task.Name, task.State, task.Attempt)
		}
	}
}

func TestFlakyTaskIsRetriedAfterBackoffAndRunSucceeds(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	startStack(t, s, 1)
	s.Apply(t, `
name: flaky
tasks:
  - name: once
    handler: fail
    params: {times: 1}
    retry: {max_attempts: 3, initial_backoff: 200ms, max_backoff: 200ms}
  - {name: after, handler: noop, depends_on: [once]}
`)
	id := s.Trigger(t, "flaky")
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run state = %s, want SUCCEEDED", r.State)
	}
	if _, st, attempt := r.Task(t, "once"); st != "SUCCEEDED" || attempt != 2 {
		t.Fatalf("once: state %s attempt %d, want SUCCEEDED after attempt 2", st, attempt)
	}
	var sawRetrying bool
	taskID, _, _ := r.Task(t, "once")
	var detail struct {
		Events []struct {
			From *string `json:"from_state"`
			To   string  `json:"to_state"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(s.MustCLI(t, "task", "show", taskID, "-o", "json")), &detail); err != nil {
		t.Fatal(err)
	}
	for _, e := range detail.Events {
		if e.To == "RETRYING" {
			sawRetrying = true
		}
	}
	if !sawRetrying {
		t.Fatalf("history of %s has no RETRYING transition: %+v", taskID, detail.Events)
	}
}

func TestExhaustedTaskIsDeadDownstreamUpstreamFailedSiblingSucceedsRunFailed(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	startStack(t, s, 1)
	s.Apply(t, `
name: doomed
tasks:
  - name: broken
    handler: fail
    retry: {max_attempts: 2, initial_backoff: 50ms, max_backoff: 50ms}
  - {name: downstream, handler: noop, depends_on: [broken]}
  - {name: sibling, handler: sleep, params: {duration: 300ms}}
`)
	id := s.Trigger(t, "doomed")
	harness.Eventually(t, 30*time.Second, "run to settle", func() (bool, error) {
		r := s.ShowRun(t, id)
		_, sib, _ := r.Task(t, "sibling")
		_, br, _ := r.Task(t, "broken")
		return r.State == "FAILED" && sib == "SUCCEEDED" && br == "DEAD", nil
	})
	r := s.ShowRun(t, id)
	if _, st, attempt := r.Task(t, "broken"); st != "DEAD" || attempt != 2 {
		t.Fatalf("broken: %s attempt %d, want DEAD after 2 attempts", st, attempt)
	}
	if _, st, _ := r.Task(t, "downstream"); st != "UPSTREAM_FAILED" {
		t.Fatalf("downstream: %s, want UPSTREAM_FAILED (mode 46)", st)
	}
	if _, _, code := s.CLI(t, "run", "wait", id, "--timeout", "5s"); code != 1 {
		t.Fatalf("run wait on a FAILED run exited %d, want 1", code)
	}
}

// TestUnseenWorkflowRunsOnSeparateDaemonsWithTwoWorkers is the issue's
// acceptance check: a fan-out of five branches with a flaky one, a join, a
// task with an idempotency key, on scheduler + publisher + two workers; and a
// workflow with a task that can never succeed ends FAILED with it DEAD.
func TestUnseenWorkflowRunsOnSeparateDaemonsWithTwoWorkers(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	startStack(t, s, 2, "--concurrency", "3")
	s.Apply(t, `
name: fanout-five
description: five branches, one flaky, a join, an idempotent report
tasks:
  - {name: start, handler: noop}
  - {name: b1, handler: sleep, params: {duration: 100ms}, depends_on: [start]}
  - {name: b2, handler: sleep, params: {duration: 100ms}, depends_on: [start]}
  - name: b3
    handler: fail
    params: {times: 2, message: flaky branch}
    retry: {max_attempts: 4, initial_backoff: 100ms, max_backoff: 300ms}
    depends_on: [start]
  - {name: b4, handler: noop, depends_on: [start]}
  - {name: b5, handler: sleep, params: {duration: 50ms}, depends_on: [start]}
  - {name: join, handler: noop, depends_on: [b1, b2, b3, b4, b5]}
  - name: report
    handler: noop
    depends_on: [join]
    idempotency_key: "report-{{ .Params.day }}"
`)
	s.Apply(t, `
name: hopeless
tasks:
  - {name: ok, handler: noop}
  - name: never
    handler: fail
    params: {message: this task can never succeed}
    retry: {max_attempts: 2, initial_backoff: 50ms, max_backoff: 50ms}
`)
	out, errOut, code := s.CLI(t, "run", "trigger", "fanout-five", "--param", "day=2026-11-30", "--wait", "--timeout", "60s", "-o", "json")
	if code != 0 {
		t.Fatalf("trigger --wait fanout-five: exit %d\n%s\n%s", code, out, errOut)
	}
	var r harness.RunJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.State != "SUCCEEDED" {
		t.Fatalf("fanout-five: %s", r.State)
	}
	if _, _, attempt := r.Task(t, "b3"); attempt != 3 {
		t.Fatalf("b3 attempts = %d, want 3 (two planned failures)", attempt)
	}
	out, errOut, code = s.CLI(t, "run", "trigger", "hopeless", "--wait", "--timeout", "60s", "-o", "json")
	if code != 1 {
		t.Fatalf("trigger --wait hopeless: exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	r = harness.RunJSON{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if _, st, _ := r.Task(t, "never"); r.State != "FAILED" || st != "DEAD" {
		t.Fatalf("hopeless: run %s, never %s; want FAILED and DEAD", r.State, st)
	}
}
