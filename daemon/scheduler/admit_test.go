package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// dispatchedOf counts the task runs of workflow that have an outbox row.
func (r *passRig) dispatchedOf(workflow string) int {
	r.t.Helper()
	var n int
	if err := r.db.QueryRow(`SELECT count(DISTINCT o.task_run_id) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
	                           JOIN workflow_runs w ON w.id = t.run_id WHERE w.workflow_name = $1`, workflow).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestTheSchedulerWakesWhenARateKeyHasRoomAgain: a rate limit of 2 per
// 500 ms over 5 tasks, under a scheduler whose sweep is a minute away and
// that hears no notification after the trigger's: only the admission's
// own due time (store.AdmitResult.RateDue) can wake it, and it admits the
// rest on time (2 at once, 2 after ~0.5 s, 1 after ~1 s).
func TestTheSchedulerWakesWhenARateKeyHasRoomAgain(t *testing.T) {
	r := newPassRig(t, func(c *Config) { c.SweepInterval = time.Minute; c.FullSweepInterval = time.Minute })
	storetest.Apply(t, r.st, "name: rated\ntasks:\n  - {name: a, handler: noop, rate_limit: {key: api, limit: 2, per: 500ms}}\n")
	for range 5 {
		storetest.Trigger(t, r.st, "rated", "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	start := time.Now()
	r.waitFor("two tasks admitted at once", 5*time.Second, func() bool { return r.dispatchedOf("rated") >= 2 })
	r.waitFor("all five admitted", 5*time.Second, func() bool { return r.dispatchedOf("rated") == 5 })
	if took := time.Since(start); took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("five starts at 2 per 500 ms took %v, want about 1 s", took)
	}
}
