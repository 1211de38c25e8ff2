package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// idemreuseTask is the `ffctl run show -o json` task fields this test reads.
type idemreuseTask struct {
	ID         string          `json:"id"`
	State      string          `json:"state"`
	Result     json.RawMessage `json:"result"`
	ReusedFrom *struct {
		TaskRunID string `json:"task_run_id"`
		RunID     string `json:"run_id"`
	} `json:"reused_from"`
}

// idemreuseShow reads the one task of run id from `ffctl run show -o json`,
// keeping the raw JSON for the message.
func idemreuseShow(t *testing.T, s *harness.Stack, id string) (idemreuseTask, string) {
	t.Helper()
	out := s.MustCLI(t, "run", "show", id, "-o", "json")
	var r struct {
		Tasks []idemreuseTask `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Tasks) != 1 {
		t.Fatalf("run show %s: %v\n%s", id, err, out)
	}
	return r.Tasks[0], out
}

// TestAReRunThatReusesAResultSaysSoAndRunsAgainOnceTheKeyIsForgotten is the
// story of issue 11 through the real daemons and ffctl: a task with
// `idempotency_key: extract-{{ .Params.date }}` is re-run for the same
// date; the handler does not run, and run show (JSON and table) and task
// show name the task run and run whose result was reused. The operator
// forgets the key (audited); the next run with the key runs the handler.
func TestAReRunThatReusesAResultSaysSoAndRunsAgainOnceTheKeyIsForgotten(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, fmt.Sprintf(`
name: extract
tasks:
  - name: extract
    handler: shell
    params: {command: ["sh", "-c", "echo $FLOWFORGE_RUN_ID >> %s; echo extracted-by-$FLOWFORGE_RUN_ID"]}
    idempotency_key: "extract-{{ .Params.date }}"
`, count))
	s.ControlPlane(t)
	s.Daemon(t, "worker", "worker", "--allow-shell")
	runOnce := func() string {
		t.Helper()
		id := s.Trigger(t, "extract", "date=2026-11-30")
		if r := s.WaitRunTerminal(t, id, 60*time.Second); r.State != "SUCCEEDED" {
			t.Fatalf("run %s ended %s", id, r.State)
		}
		return id
	}
	first := runOnce()
	second := runOnce()
	if ex := dispatchExecutions(t, count); len(ex) != 1 || ex[first] != 1 {
		t.Fatalf("executions %v, want one, by run %s", ex, first)
	}
	src, _ := idemreuseShow(t, s, first)
	if src.ReusedFrom != nil {
		t.Fatalf("the first run's task shows a reuse: %+v", src.ReusedFrom)
	}
	got, raw := idemreuseShow(t, s, second)
	if got.ReusedFrom == nil || got.ReusedFrom.TaskRunID != src.ID || got.ReusedFrom.RunID != first {
		t.Fatalf("the re-run's task: reused_from %+v, want task run %s of run %s\n%s", got.ReusedFrom, src.ID, first, raw)
	}
	note := fmt.Sprintf("result reused from task run %s of run %s", src.ID, first)
	for _, args := range [][]string{{"run", "show", second}, {"task", "show", got.ID}} {
		if out := s.MustCLI(t, args...); !strings.Contains(out, note) {
			t.Fatalf("ffctl %s does not say %q:\n%s", strings.Join(args, " "), note, out)
		}
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'SUCCEEDED' AND reason LIKE $2`, got.ID, note+"%"); n != 1 {
		t.Fatalf("%d history rows record the reuse, want 1", n)
	}

	out := s.MustCLI(t, "task", "forget-key", got.ID, "--reason", "extract bug fixed", "-o", "json")
	var fk struct {
		Forgotten bool   `json:"forgotten"`
		Key       string `json:"key"`
		Owner     struct {
			TaskRunID string `json:"task_run_id"`
		} `json:"owner"`
	}
	if err := json.Unmarshal([]byte(out), &fk); err != nil || !fk.Forgotten || fk.Key != "extract-2026-11-30" || fk.Owner.TaskRunID != src.ID {
		t.Fatalf("forget-key: %v\n%s", err, out)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM idempotency_key_events WHERE key = 'extract-2026-11-30' AND actor LIKE 'cli:%@%' AND reason = 'extract bug fixed'`); n != 1 {
		t.Fatalf("%d audit rows of the forget, want 1", n)
	}
	third := runOnce()
	if ex := dispatchExecutions(t, count); len(ex) != 2 || ex[third] != 1 {
		t.Fatalf("executions %v, want the first run's and the third's", ex)
	}
	if r, _ := idemreuseShow(t, s, third); r.ReusedFrom != nil || !strings.Contains(string(r.Result), "extracted-by-"+third) {
		t.Fatalf("the run after the forget: reused_from %+v, result %s; want its own result", r.ReusedFrom, r.Result)
	}
}
