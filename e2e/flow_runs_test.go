package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Run-level concurrency (issue 27) against real processes.

// TestANewRunOfACancelInProgressKeyCancelsTheRunningOneEndToEnd: a
// workflow with `concurrency: {key: params.env, limit: 1, strategy:
// cancel-in-progress}`. The first run's handler (a five-minute sleep command) runs; a second run of the same key requests the first's cancellation:
// the worker cancels its handler's context at once (the first run ends
// CANCELLED within seconds, not minutes, with the reason naming the key),
// and the second run then starts and succeeds. A run of another key is
// never held back.
func TestANewRunOfACancelInProgressKeyCancelsTheRunningOneEndToEnd(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--allow-shell", "--concurrency", "4")
	s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms")
	s.Apply(t, `name: deploy
concurrency: {key: params.env, limit: 1, strategy: cancel-in-progress}
tasks:
  - {name: roll, handler: shell, params: {command: [sleep, "{{ .Params.d }}"]}}
`)
	db := s.DB(t)
	first := s.Trigger(t, "deploy", "env=prod", "d=300")
	crashWaitTask(t, db, first, "roll", 30*time.Second, "RUNNING on the worker", func(c crashTask) bool { return c.State == "RUNNING" })
	other := s.Trigger(t, "deploy", "env=staging", "d=0.01")
	heldWaitSettled(t, db, other, "SUCCEEDED", 30*time.Second)
	start := time.Now()
	second := s.Trigger(t, "deploy", "env=prod", "d=0.01")
	heldWaitSettled(t, db, first, "CANCELLED", 30*time.Second)
	// The worker heartbeats every lease/3 (10 s): within 8 s, only the
	// notification on CancelChannel can have stopped the handler.
	if el := time.Since(start); el > 8*time.Second {
		t.Errorf("the running run took %v to stop: its handler's context was not cancelled at once", el)
	}
	heldWaitSettled(t, db, second, "SUCCEEDED", 30*time.Second)
	var reason string
	if err := db.QueryRow(`SELECT coalesce(cancel_reason, '') FROM workflow_runs WHERE id = $1`, first).Scan(&reason); err != nil ||
		!strings.Contains(reason, "concurrency deploy/prod: a newer run of the key replaces it (strategy cancel-in-progress)") {
		t.Errorf("the first run's cancel reason %q (%v) does not name the key and the strategy", reason, err)
	}
	if h := heldMustTask(t, db, first, "roll"); h.State != "CANCELLED" {
		t.Errorf("the first run's task is %s, want CANCELLED", h.State)
	}
	// The second run started only once the first had ended.
	var overlap bool
	if err := db.QueryRow(`SELECT (SELECT min(started_at) FROM task_runs WHERE run_id = $2) < (SELECT finished_at FROM workflow_runs WHERE id = $1)`,
		first, second).Scan(&overlap); err != nil || overlap {
		t.Errorf("the second run's task started before the first run ended (%v)", err)
	}
}

// TestHigherPrioritiesGoFirstThroughASaturatedKey: a concurrency key
// whose limit is the worker's four slots holds a backlog of 1,000
// priority-1 runs in PostgreSQL; 50 priority-4 runs triggered after the
// first have started all start before the next 100 priority-1 tasks do
// (the admission takes the higher priority first), and every run
// succeeds.
func TestHigherPrioritiesGoFirstThroughASaturatedKey(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--concurrency", "4")
	s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms")
	s.Apply(t, `name: prio
tasks:
  - {name: a, handler: sleep, params: {duration: 5ms}, priority: 1, concurrency: {key: pool, limit: 4}}
`)
	db := s.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	params := make([]json.RawMessage, 1000)
	for i := range params {
		params[i] = json.RawMessage(`{}`)
	}
	if _, err := s.Store.TriggerMany(ctx, store.TriggerManyRequest{Workflow: "prio", Params: params, Actor: "e2e"}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "priority-1 tasks to start", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE started_at IS NOT NULL`)
		return n >= 8, fmt.Errorf("%d started", n)
	})
	var since time.Time
	if err := db.QueryRow(`SELECT now()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := s.Store.Trigger(ctx, store.TriggerRequest{Workflow: "prio", Priority: 4, Actor: "e2e"}); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 60*time.Second, "the 50 priority-4 tasks to start", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE priority = 4 AND started_at IS NOT NULL`)
		return n == 50, fmt.Errorf("%d started", n)
	})
	between := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE priority = 1 AND started_at > $1
	                                      AND started_at < (SELECT max(started_at) FROM task_runs WHERE priority = 4)`, since)
	t.Logf("%d priority-1 tasks started between the priority-4 triggers and the last priority-4 start", between)
	if between >= 100 {
		t.Errorf("%d priority-1 tasks started before the last priority-4 one, want fewer than 100", between)
	}
	harness.Eventually(t, 90*time.Second, "every run to succeed", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE state = 'SUCCEEDED' AND finished_at IS NOT NULL`)
		return n == 1050, fmt.Errorf("%d of 1050 SUCCEEDED", n)
	})
}

// TestARunLevelQueueKeyStartsTheNextRunAsOneEnds: strategy queue, limit
// 1, five one-task runs, under a scheduler whose sweep is a minute apart:
// each run ends in its task's finish (the finish settles a run whose only
// task succeeded), and that finish names the run to the schedulers
// because it gave back a run slot, so the next run is admitted at once,
// not at the next sweep. The runs never overlap, and all succeed.
//
// The five are triggered before the scheduler starts: a trigger asks for
// an admission round too, so triggers spread out in time (a loaded
// machine starts each `ffctl run trigger` slowly) could admit each run
// after the one before had ended, and the finish's wake-up would go
// untested. The scheduler's first sweep admits the first run; each of
// the other four can only be admitted by the finish before it.
func TestARunLevelQueueKeyStartsTheNextRunAsOneEnds(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--concurrency", "4")
	s.Apply(t, `name: serial
concurrency: {key: one-at-a-time, limit: 1}
tasks:
  - {name: a, handler: sleep, params: {duration: 50ms}}
`)
	db := s.DB(t)
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = s.Trigger(t, "serial")
	}
	s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "1m", "--full-sweep-interval", "10m")
	for _, id := range ids {
		heldWaitSettled(t, db, id, "SUCCEEDED", 30*time.Second)
	}
	overlaps := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs a JOIN workflow_runs b ON a.id < b.id
	                                      AND a.workflow_name = 'serial' AND b.workflow_name = 'serial'
	                                      AND (SELECT started_at FROM task_runs WHERE run_id = a.id) < b.finished_at
	                                      AND (SELECT started_at FROM task_runs WHERE run_id = b.id) < a.finished_at`)
	if overlaps != 0 {
		t.Errorf("%d pairs of runs of one key with limit 1 overlapped", overlaps)
	}
}
