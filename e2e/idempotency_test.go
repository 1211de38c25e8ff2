package e2e

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 15: non-idempotent handler replay.

// TestTwentyConcurrentRunsSharingAnIdempotencyKeyRunTheHandlerOnce queues
// 20 runs whose task renders the same idempotency key, then starts two
// worker processes with ten slots each, so all 20 attempts are claimed at
// once. The shell handler appends to a file and prints its own pid (a
// result unique to each execution): it ran once, and all 20 task runs
// SUCCEEDED with that one result.
func TestTwentyConcurrentRunsSharingAnIdempotencyKeyRunTheHandlerOnce(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, fmt.Sprintf(`
name: charge
tasks:
  - name: charge
    handler: shell
    params: {command: ["sh", "-c", "echo $FLOWFORGE_RUN_ID >> %s; sleep 0.5; echo charged-by-$$"]}
    idempotency_key: "k-{{ .Params.day }}"
`, count))
	s.ControlPlane(t)
	ids := dispatchTriggerMany(t, s, "charge", 20, "day=2026-03-01")
	dispatchWaitPublished(t, db, 20)
	for _, name := range []string{"worker-a", "worker-b"} {
		s.Daemon(t, name, "worker", "--allow-shell", "--concurrency", "10")
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, ids...)

	ex := dispatchExecutions(t, count)
	total := 0
	for _, n := range ex {
		total += n
	}
	if total != 1 {
		t.Fatalf("the handler ran %d times (%v), want once", total, ex)
	}
	rows, err := db.QueryContext(t.Context(), `SELECT run_id::text, state, result::text FROM task_runs WHERE run_id = ANY ($1::uuid[])`, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var want string
	seen := 0
	for rows.Next() {
		var run, state string
		var res sql.NullString
		if err := rows.Scan(&run, &state, &res); err != nil {
			t.Fatal(err)
		}
		seen++
		if state != "SUCCEEDED" || !strings.Contains(res.String, "charged-by-") {
			t.Fatalf("run %s: task %s with result %q, want SUCCEEDED with the handler's output", run, state, res.String)
		}
		if want == "" {
			want = res.String
		} else if res.String != want {
			t.Fatalf("run %s: result %s, want the one execution's %s", run, res.String, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(ids) {
		t.Fatalf("%d task runs, want %d", seen, len(ids))
	}
	dispatchAssertClaimedOnce(t, db)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM idempotency_keys WHERE key = 'k-2026-03-01' AND completed_at IS NOT NULL`); n != 1 {
		t.Fatalf("completed key rows: %d, want 1", n)
	}
}
