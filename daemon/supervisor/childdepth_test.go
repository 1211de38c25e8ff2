package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/supervisor"
)

// TestTheSchedulersStoreHasItsMaxChildDepth: a scheduler process with
// Scheduler.MaxChildDepth 1 opens its store with that bound. outer starts
// middle (depth 1, within it), whose task that would start inner (depth
// 2) ends DEAD naming --max-child-depth 1; at the default (10) it would
// have started inner.
func TestTheSchedulersStoreHasItsMaxChildDepth(t *testing.T) {
	st, dbURL := storetest.New(t)
	for _, src := range []string{
		"name: inner\ntasks:\n  - {name: leaf, handler: noop}\n",
		"name: middle\ntasks:\n  - {name: start-inner, workflow: {name: inner}}\n",
		"name: outer\ntasks:\n  - {name: start-middle, workflow: {name: middle}}\n",
	} {
		storetest.Apply(t, st, src)
	}
	run := storetest.Trigger(t, st, "outer", "")
	start(t, supervisor.Config{Role: supervisor.RoleScheduler, ID: "sup-depth", DatabaseURL: dbURL, HealthAddr: "",
		Scheduler: scheduler.Config{MaxChildDepth: 1, SweepInterval: 50 * time.Millisecond}})
	var middle store.Run
	eventually(t, 20*time.Second, "middle's task to end", func() bool {
		runs, err := st.ListRuns(t.Context(), store.RunFilter{Workflow: "middle"})
		if err != nil || len(runs) != 1 {
			return false
		}
		middle, err = st.GetRun(t.Context(), runs[0].ID)
		return err == nil && middle.Tasks[0].State != core.TaskPending && middle.Tasks[0].State != core.TaskRunning
	})
	task := middle.Tasks[0]
	if task.State != core.TaskDead || task.Error == nil || !strings.Contains(*task.Error, "deeper than --max-child-depth 1") {
		t.Fatalf("middle's %s: %s (%v), want DEAD past --max-child-depth 1 (outer run %s)", task.Name, task.State, task.Error, run)
	}
	if runs, err := st.ListRuns(t.Context(), store.RunFilter{Workflow: "inner"}); err != nil || len(runs) != 0 {
		t.Fatalf("runs of inner: %d, %v; want none", len(runs), err)
	}
}
