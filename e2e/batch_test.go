package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/e2e/harness"
)

// TestAWorkerKilledWithAFinishBatchBuiltHasItsTasksReapedAndRecordedOnce:
// mode 52. A worker runs eight tasks that finish together; with the first
// batch of their outcomes built and not yet recorded, the process dies
// (failpoint worker.exit-before-finish-batch: os.Exit, as abrupt as a
// SIGKILL for the database and the broker). Nothing of that batch was
// recorded; the leases lapse, the reaper retries every task and a second
// worker finishes them. The history holds exactly one end per attempt (no
// attempt is recorded twice, none by the dead worker), and every task
// SUCCEEDED on its second attempt.
func TestAWorkerKilledWithAFinishBatchBuiltHasItsTasksReapedAndRecordedOnce(t *testing.T) {
	t.Parallel()
	const tasks = 8
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	var wf strings.Builder
	wf.WriteString("name: batch-crash\ntasks:\n")
	for i := range tasks {
		fmt.Fprintf(&wf, "  - {name: t%d, handler: sleep, params: {duration: 300ms}, retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}}\n", i)
	}
	s.Apply(t, wf.String())
	victim := s.DaemonEnv(t, "worker-victim", "worker", []string{failpoint.EnvVar + "=" + string(failpoint.WorkerExitBeforeFinishBatch)},
		"--lease", "1s", "--id", "victim", "--concurrency", fmt.Sprint(tasks))
	run := s.Trigger(t, "batch-crash")
	harness.Eventually(t, 30*time.Second, "all tasks RUNNING on the victim", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND state = 'RUNNING' AND worker_id = 'victim'`, run)
		return n == tasks || victim.Exited(), fmt.Errorf("%d running", n)
	})
	code, err := victim.Wait(30 * time.Second)
	if err != nil || code != failpoint.ExitCode {
		t.Fatalf("victim: exit %d (%v), want the failpoint's %d", code, err, failpoint.ExitCode)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND from_state = 'RUNNING' AND actor = 'victim'`, run); n != 0 {
		t.Fatalf("the dead worker recorded %d outcomes; its batch must die with it", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND state = 'RUNNING' AND worker_id = 'victim'`, run); n != tasks {
		t.Fatalf("%d tasks RUNNING on the dead worker, want %d", n, tasks)
	}
	s.Daemon(t, "worker-rescuer", "worker", "--lease", "1s", "--id", "rescuer", "--concurrency", fmt.Sprint(tasks))
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, run)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM (SELECT task_run_id, attempt FROM task_events
	         WHERE run_id = $1 AND from_state = 'RUNNING' GROUP BY 1, 2 HAVING count(*) <> 1) x`, run); n != 0 {
		t.Fatalf("%d attempts have other than one recorded end", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND from_state = 'RUNNING' AND to_state = 'RETRYING'
	         AND attempt = 1 AND reason LIKE '%lease expired%'`, run); n != tasks {
		t.Fatalf("%d first attempts reaped for an expired lease, want %d", n, tasks)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND state = 'SUCCEEDED' AND attempt = 2 AND worker_id = 'rescuer'`, run); n != tasks {
		t.Fatalf("%d tasks SUCCEEDED on attempt 2 by the rescuer, want %d", n, tasks)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND to_state = 'SUCCEEDED'`, run); n != tasks {
		t.Fatalf("%d successes recorded, want %d (one per task)", n, tasks)
	}
}
