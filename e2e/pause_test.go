package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

const pausedChain = "name: held\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a]}\n"

// TestAPausedWorkflowsQueuedDispatchIsHandedBackAndRunsOnResume (mode 63,
// with real daemons): a dispatch already on the queue when the pause
// commits reaches a real worker, whose claim loses: the delivery is acked
// without running the handler (counted as reason "paused", not looping on
// the queue), the task stays READY, and a run triggered while paused
// (mode queue) is created but its dispatch stays unpublished. The resume
// sends the backlog at once (the scheduler's redispatch is 5 minutes
// away): both runs complete, each task with one attempt.
func TestAPausedWorkflowsQueuedDispatchIsHandedBackAndRunsOnResume(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.ControlPlane(t)
	s.Apply(t, pausedChain)
	first := s.Trigger(t, "held")
	harness.Eventually(t, 20*time.Second, "the first dispatch on the queue", func() (bool, error) {
		n, _, err := s.QueueDepth(s.Queue) // an error until the publisher declared the queue
		return err == nil && n == 1, err
	})
	s.MustCLI(t, "workflow", "pause", "held", "--reason", "e2e: hold it")
	queued := s.Trigger(t, "held")

	w := s.DaemonWithHealth(t, "worker", "worker", "--concurrency", "2")
	harness.WaitMetric(t, w.Health, 1, "flowforge_claims_lost_total", `reason="paused"`)
	if n := s.Messages(t, s.Queue); n != 0 {
		t.Fatalf("%d messages on the queue after the hand-back, want 0 (acked, not requeued)", n)
	}
	for _, id := range []string{first, queued} {
		r := s.ShowRun(t, id)
		if _, st, attempt := r.Task(t, "a"); st != "READY" || attempt != 0 {
			t.Fatalf("run %s task a: %s attempt %d while paused, want READY attempt 0 (the handler never ran)", id, st, attempt)
		}
	}
	db := s.DB(t)
	var pending int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&pending); err != nil || pending != 1 {
		t.Fatalf("%d unpublished outbox rows while paused (%v), want 1: the queued run's root", pending, err)
	}
	var show struct {
		Paused *struct {
			Reason string `json:"reason"`
		} `json:"paused"`
	}
	if err := json.Unmarshal([]byte(s.MustCLI(t, "run", "show", queued, "-o", "json")), &show); err != nil || show.Paused == nil || show.Paused.Reason != "e2e: hold it" {
		t.Fatalf("run show -o json of a paused run: %+v %v", show.Paused, err)
	}

	out := s.MustCLI(t, "workflow", "resume", "held", "--reason", "e2e: go", "-o", "json")
	var res struct {
		Resumed      bool `json:"resumed"`
		Redispatched int  `json:"redispatched"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || !res.Resumed || res.Redispatched != 1 {
		t.Fatalf("resume: %s (%v), want resumed with the handed-back task re-sent", out, err)
	}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, first, queued)
	for _, id := range []string{first, queued} {
		r := s.ShowRun(t, id)
		for _, name := range []string{"a", "b"} {
			if _, _, attempt := r.Task(t, name); attempt != 1 {
				t.Fatalf("run %s task %s ran %d attempts, want 1", id, name, attempt)
			}
		}
	}
}

// TestModeDropDropsTriggersAndModeQueueRunsThemAfterResume (mode 67, real
// daemons): while paused with mode drop `run trigger` exits 3 and creates
// nothing, and the resume reports the drops; while paused with mode queue
// the run is created and completes after the resume.
func TestModeDropDropsTriggersAndModeQueueRunsThemAfterResume(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.ControlPlane(t)
	s.Daemon(t, "worker", "worker", "--concurrency", "2")
	s.Apply(t, pausedChain)

	s.MustCLI(t, "workflow", "pause", "held", "--reason", "e2e: drop", "--mode", "drop")
	for range 2 {
		out, errOut, code := s.CLI(t, "run", "trigger", "held")
		if code != 3 || out != "" || !strings.Contains(errOut, "workflow is paused (mode drop): the trigger was dropped") {
			t.Fatalf("trigger while dropping: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	}
	out := s.MustCLI(t, "workflow", "resume", "held", "-o", "json")
	var res struct {
		Dropped int `json:"dropped"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Dropped != 2 {
		t.Fatalf("resume after the drops: %s %v, want 2 dropped", out, err)
	}
	if runs := s.MustCLI(t, "run", "list", "-o", "json"); strings.TrimSpace(runs) != "[]" {
		t.Fatalf("dropped triggers created runs: %s", runs)
	}

	s.MustCLI(t, "workflow", "pause", "held", "--reason", "e2e: queue")
	id := s.Trigger(t, "held")
	// Its roots are READY (held): it shows RUNNING with nothing done, as
	// docs/design.md says, from its trigger on.
	if r := s.ShowRun(t, id); r.State != "RUNNING" {
		t.Fatalf("a queued run is %s while paused, want RUNNING", r.State)
	}
	s.MustCLI(t, "workflow", "resume", "held")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, id)
}

// TestAPauseUnderLoadHoldsEveryTaskUntilTheResume (mode 62, real daemons):
// thirty runs of a three-task chain flow through a scheduler, a publisher
// and a worker; the pause lands while tasks are being promoted, published
// and claimed. Once the tasks running at the pause have finished, no claim
// begun after the pause (a second after it, for the one-statement window)
// has won, tasks are held; after the resume every run succeeds and no task
// ran twice.
func TestAPauseUnderLoadHoldsEveryTaskUntilTheResume(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.ControlPlane(t)
	s.Daemon(t, "worker", "worker", "--concurrency", "8")
	s.Apply(t, "name: load\ntasks:\n"+
		"  - {name: a, handler: sleep, params: {duration: 150ms}}\n"+
		"  - {name: b, handler: sleep, params: {duration: 150ms}, depends_on: [a]}\n"+
		"  - {name: c, handler: sleep, params: {duration: 150ms}, depends_on: [b]}\n")
	out, errOut, code := s.CLIWithInput(t, strings.Repeat("{}\n", 30), "run", "trigger", "load", "--runs-file", "-")
	if code != 0 {
		t.Fatalf("bulk trigger: exit %d\n%s%s", code, out, errOut)
	}
	ids := strings.Fields(out)
	db := s.DB(t)
	ctx := context.Background()
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	harness.Eventually(t, 30*time.Second, "ten tasks to succeed", func() (bool, error) {
		return count(`SELECT count(*) FROM task_runs WHERE state = 'SUCCEEDED'`) >= 10, nil
	})
	s.MustCLI(t, "workflow", "pause", "load", "--reason", "e2e: under load")
	harness.Eventually(t, 30*time.Second, "the tasks running at the pause to finish", func() (bool, error) {
		return count(`SELECT count(*) FROM task_runs WHERE state = 'RUNNING'`) == 0, nil
	})
	if n := count(`SELECT count(*) FROM task_events e, workflow_pauses p
	                WHERE e.to_state = 'RUNNING' AND e.at > p.paused_at + interval '1 second'`); n != 0 {
		t.Fatalf("%d claims won more than a second after the pause", n)
	}
	held := count(`SELECT count(*) FROM task_runs WHERE state IN ('READY', 'PENDING')`)
	if held == 0 {
		t.Fatal("every task ran before the pause: nothing was held (slow the tasks down)")
	}
	t.Logf("%d tasks held by the pause", held)
	s.MustCLI(t, "workflow", "resume", "load", "--reason", "e2e: go")
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, ids...)
	if n := count(`SELECT count(*) FROM task_runs WHERE attempt <> 1`); n != 0 {
		t.Fatalf("%d tasks ran more or less than once", n)
	}
}
