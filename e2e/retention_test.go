package e2e

import (
	"database/sql"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

const retentionWorkflow = `
name: retained
tasks:
  - {name: a, handler: noop}
`

// settleAgo makes a run of retained whose task ended taskState and which
// settled in runState days ago (database clock), as a scheduler would
// record it: history simulated by backdating, never by waiting.
func settleAgo(t *testing.T, s *harness.Stack, db *sql.DB, runState, taskState string, days int) string {
	t.Helper()
	id := s.Trigger(t, "retained")
	for _, q := range []string{
		`UPDATE task_runs SET state = $2, finished_at = now() - $3::int * interval '1 day' WHERE run_id = $1 AND $4::text IS NOT NULL`,
		`UPDATE workflow_runs SET state = $4, finished_at = now() - $3::int * interval '1 day' WHERE id = $1 AND $2::text IS NOT NULL`,
	} {
		if _, err := db.ExecContext(t.Context(), q, id, taskState, days, runState); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return id
}

// TestTwoSchedulersPruneWhatTheirFlagsSay: real `ffctl daemon scheduler`
// processes with the retention flags. A scheduler started with
// --prune=false deletes nothing; two schedulers pruning at once delete the
// backdated SUCCEEDED runs and the FAILED run older than --retain-dead,
// each exactly once (their /metrics add up), and keep the FAILED run
// younger than it and the open run; each logs one line per pass that
// pruned.
func TestTwoSchedulersPruneWhatTheirFlagsSay(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Apply(t, retentionWorkflow)
	var old []string
	for range 30 {
		old = append(old, settleAgo(t, s, db, "SUCCEEDED", "SUCCEEDED", 8))
	}
	recent := settleAgo(t, s, db, "SUCCEEDED", "SUCCEEDED", 2)
	failedOld := settleAgo(t, s, db, "FAILED", "DEAD", 40)
	failedRecent := settleAgo(t, s, db, "FAILED", "DEAD", 10)
	open := s.Trigger(t, "retained")
	exists := func(id string) bool {
		var n int
		if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM workflow_runs WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	off := s.DaemonWithHealth(t, "scheduler-off", "scheduler", "--prune=false", "--retain-succeeded", "1d")
	off.WaitForLog(t, "scheduler: started", 20*time.Second)
	harness.Eventually(t, 20*time.Second, "a scheduler pass", func() (bool, error) {
		var n int
		err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id WHERE r.id = $1 AND t.state = 'READY'`, open).Scan(&n)
		return n == 1, err
	})
	if strings.Contains(off.Logs(), "pruner: started") || !exists(old[0]) {
		t.Fatalf("--prune=false ran a pruner (run kept: %v):\n%s", exists(old[0]), off.Logs())
	}
	if err := off.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := off.Wait(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("scheduler-off: exit %d, %v", code, err)
	}

	flags := []string{"--retain-succeeded", "7d", "--retain-dead", "30d", "--prune-interval", "1s"}
	a := s.DaemonWithHealth(t, "scheduler-a", "scheduler", flags...)
	b := s.DaemonWithHealth(t, "scheduler-b", "scheduler", flags...)
	gone := append([]string{failedOld}, old...)
	harness.Eventually(t, 30*time.Second, "the old runs pruned", func() (bool, error) {
		for _, id := range gone {
			if exists(id) {
				return false, nil
			}
		}
		return true, nil
	})
	for name, id := range map[string]string{"recent SUCCEEDED": recent, "FAILED within --retain-dead": failedRecent, "open": open} {
		if !exists(id) {
			t.Errorf("the %s run %s was pruned", name, id)
		}
	}
	pruned := func(state string) float64 {
		return harness.Metric(t, a.Health, "flowforge_pruned_rows_total", `table="workflow_runs"`, `state="`+state+`"`) +
			harness.Metric(t, b.Health, "flowforge_pruned_rows_total", `table="workflow_runs"`, `state="`+state+`"`)
	}
	if got := pruned("SUCCEEDED"); got != float64(len(old)) {
		t.Errorf("the two pruners' metrics count %v SUCCEEDED runs, want %d", got, len(old))
	}
	if got := pruned("FAILED"); got != 1 {
		t.Errorf("the two pruners' metrics count %v FAILED runs, want 1", got)
	}
	lines := strings.Count(a.Logs(), `"msg":"pruner: pruned"`) + strings.Count(b.Logs(), `"msg":"pruner: pruned"`)
	if lines < 1 || lines > 4 {
		t.Errorf("%d 'pruner: pruned' lines, want one per pass that pruned (1 to 4 here)", lines)
	}
	for _, d := range []*harness.HealthDaemon{a, b} {
		if strings.Contains(d.Logs(), "pruner: pass failed") {
			t.Errorf("a pass failed:\n%s", d.Logs())
		}
	}
}
