package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 20: a join whose parents finish together.

// TestAJoinOfEightSimultaneousParentsIsDispatchedOnce queues 30 runs of a
// workflow whose join waits for eight parallel noop parents, then starts
// two schedulers and two workers with 16 slots each: the eight parents of a
// run finish within milliseconds of each other, each finish waking both
// schedulers. Every join gets exactly one outbox row, one claim and one
// execution.
func TestAJoinOfEightSimultaneousParentsIsDispatchedOnce(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	var wf strings.Builder
	wf.WriteString("name: join8\ntasks:\n")
	var parents []string
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&wf, "  - {name: p%d, handler: noop}\n", i)
		parents = append(parents, fmt.Sprintf("p%d", i))
	}
	fmt.Fprintf(&wf, "  - {name: join, handler: shell, params: {command: %s}, depends_on: [%s]}\n",
		dispatchCountCommand(count), strings.Join(parents, ", "))
	s.Apply(t, wf.String())
	s.Daemon(t, "publisher", "publisher")
	ids := dispatchTriggerMany(t, s, "join8", 30)
	dispatchWaitPublished(t, db, 30*8) // every parent queued before anything runs
	s.Daemon(t, "scheduler-a", "scheduler")
	s.Daemon(t, "scheduler-b", "scheduler")
	s.Daemon(t, "worker-a", "worker", "--allow-shell", "--concurrency", "16")
	s.Daemon(t, "worker-b", "worker", "--allow-shell", "--concurrency", "16")
	s.WaitRuns(t, "SUCCEEDED", 90*time.Second, ids...)

	if n := harness.QueryInt(t, db, `
SELECT count(*) FROM task_runs t
 WHERE t.task_name = 'join'
   AND (SELECT count(*) FROM outbox o WHERE o.task_run_id = t.id) <> 1`); n != 0 {
		t.Fatalf("%d joins do not have exactly one outbox row", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox`); n != 30*9 {
		t.Fatalf("%d outbox rows, want %d", n, 30*9)
	}
	dispatchAssertClaimedOnce(t, db)
	ex := dispatchExecutions(t, count)
	for _, id := range ids {
		if ex[id] != 1 {
			t.Errorf("run %s: join ran %d times, want 1", id, ex[id])
		}
	}
}
