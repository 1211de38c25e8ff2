package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/flowforge/flowforge/e2e/harness"
)

// Helpers shared by the failure-mode tests of crash, lease, shutdown,
// cancel, skew, consumer_timeout and output (prefix crash).

// crashTask is one task_runs row as the tests see it.
type crashTask struct {
	ID       string
	State    string
	Attempt  int
	Token    int64
	Lease    sql.NullTime
	Worker   sql.NullString
	Error    sql.NullString
	Result   sql.NullString
	LeaseDue bool // lease_expires_at < now() on the database clock
}

func crashTaskOf(t *testing.T, db *sql.DB, runID, name string) crashTask {
	t.Helper()
	var c crashTask
	err := db.QueryRow(`SELECT id::text, state, attempt, fencing_token, lease_expires_at, worker_id, error, result::text,
	                           coalesce(lease_expires_at < now(), false)
	                      FROM task_runs WHERE run_id = $1 AND task_name = $2`, runID, name).
		Scan(&c.ID, &c.State, &c.Attempt, &c.Token, &c.Lease, &c.Worker, &c.Error, &c.Result, &c.LeaseDue)
	if err != nil {
		t.Fatalf("read task %s of run %s: %v", name, runID, err)
	}
	return c
}

// crashWaitTask polls the task until cond holds and returns it.
func crashWaitTask(t *testing.T, db *sql.DB, runID, name string, timeout time.Duration, what string, cond func(crashTask) bool) crashTask {
	t.Helper()
	var last crashTask
	harness.Eventually(t, timeout, name+" "+what, func() (bool, error) {
		last = crashTaskOf(t, db, runID, name)
		return cond(last), fmt.Errorf("task is %+v", last)
	})
	return last
}

// crashEvent is one task_events row.
type crashEvent struct {
	From    sql.NullString
	To      string
	Attempt int
	Token   int64
	Actor   string
	Reason  sql.NullString
	At      time.Time
}

func crashEvents(t *testing.T, db *sql.DB, taskID string) []crashEvent {
	t.Helper()
	rows, err := db.Query(`SELECT from_state, to_state, attempt, fencing_token, actor, reason, at
	                         FROM task_events WHERE task_run_id = $1 ORDER BY id`, taskID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []crashEvent
	for rows.Next() {
		var e crashEvent
		if err := rows.Scan(&e.From, &e.To, &e.Attempt, &e.Token, &e.Actor, &e.Reason, &e.At); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// crashClaims counts the claims (READY -> RUNNING) recorded for a task.
func crashClaims(t *testing.T, db *sql.DB, taskID string) int {
	t.Helper()
	return harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'RUNNING' AND reason = 'claimed'`, taskID)
}

// crashRunState reads a run's state.
func crashRunState(t *testing.T, db *sql.DB, runID string) string {
	t.Helper()
	var st string
	if err := db.QueryRow(`SELECT state FROM workflow_runs WHERE id = $1`, runID).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// crashWaitExit waits for a process to exit and returns its status.
func crashWaitExit(t *testing.T, p *harness.Process, timeout time.Duration) int {
	t.Helper()
	code, err := p.Wait(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// TestWorkerKilledMidTaskIsReapedAndFinishedByAnotherWorker: mode 3. A real
// worker process is SIGKILLed while its handler runs; the row stays RUNNING
// until its lease lapses on the database clock, the scheduler's reaper
// counts the attempt, bumps the token, clears the lease and makes it
// RETRYING, and a second worker process completes it.
func TestWorkerKilledMidTaskIsReapedAndFinishedByAnotherWorker(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	victim := s.Daemon(t, "worker-victim", "worker", "--lease", "1s", "--id", "victim")
	s.Apply(t, `
name: crash-worker
tasks:
  - name: slow
    handler: sleep
    params: {duration: 2s}
    retry: {max_attempts: 3, initial_backoff: 1500ms, max_backoff: 1500ms}
`)
	run := s.Trigger(t, "crash-worker")
	running := crashWaitTask(t, db, run, "slow", 30*time.Second, "RUNNING on the victim", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "victim"
	})
	victim.Kill()
	if !victim.Exited() {
		t.Fatal("victim still alive after SIGKILL")
	}
	after := crashTaskOf(t, db, run, "slow")
	if after.State != "RUNNING" || after.Token != running.Token || !after.Lease.Valid {
		t.Fatalf("right after the kill the task is %+v; want still RUNNING with token %d and a lease", after, running.Token)
	}
	reaped := crashWaitTask(t, db, run, "slow", 20*time.Second, "reaped to RETRYING", func(c crashTask) bool {
		return c.State != "RUNNING"
	})
	if reaped.State != "RETRYING" || reaped.Attempt != 1 || reaped.Token != running.Token+1 || reaped.Lease.Valid {
		t.Fatalf("after the reap the task is %+v; want RETRYING, attempt 1, token %d, no lease", reaped, running.Token+1)
	}
	if !strings.Contains(reaped.Error.String, "lease expired") {
		t.Fatalf("reap error = %q, want it to say the lease expired", reaped.Error.String)
	}
	s.Daemon(t, "worker-rescuer", "worker", "--lease", "1s", "--id", "rescuer")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, run)
	final := crashTaskOf(t, db, run, "slow")
	if final.State != "SUCCEEDED" || final.Attempt != 2 || final.Worker.String != "rescuer" {
		t.Fatalf("final task %+v; want SUCCEEDED on attempt 2 by the rescuer", final)
	}
	if n := crashClaims(t, db, final.ID); n != 2 {
		t.Fatalf("claims = %d, want 2 (victim, rescuer)", n)
	}
}

// TestSchedulerKilledRepeatedlyNeitherLosesNorDuplicatesDispatches: mode 4.
// The scheduler process is SIGKILLed again and again while runs of a
// four-step chain flow (each kill lands right after it was seen promoting
// or settling; more runs are triggered between kills), and restarted each time. In the end every run SUCCEEDED, every task was
// claimed exactly once, and every task has exactly one outbox row.
func TestSchedulerKilledRepeatedlyNeitherLosesNorDuplicatesDispatches(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker-a", "worker", "--concurrency", "4")
	s.Daemon(t, "worker-b", "worker", "--concurrency", "4")
	s.Apply(t, `
name: crash-chain
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
  - {name: c, handler: sleep, params: {duration: 20ms}, depends_on: [b]}
  - {name: d, handler: noop, depends_on: [c]}
`)
	// Runs keep arriving while the scheduler is killed over and over: each
	// round triggers three runs, starts a scheduler and SIGKILLs it as soon
	// as it is seen at work (its next pass is then in flight, or about to
	// be). Its work is what the finishes leave to it: a finish promotes its
	// child itself (the counter join), so a chain the workers ran to its end
	// before the scheduler started has nothing to promote, and the
	// scheduler's mark is then the run it settles.
	const rounds, perRound = 8, 3
	progress := func() int {
		return harness.QueryInt(t, db, `SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM workflow_runs WHERE finished_at IS NOT NULL)`)
	}
	var ids []string
	for i := 0; i < rounds; i++ {
		for j := 0; j < perRound; j++ {
			ids = append(ids, s.Trigger(t, "crash-chain"))
		}
		before := progress()
		sched := s.Daemon(t, fmt.Sprintf("scheduler-%d", i), "scheduler", "--sweep-interval", "100ms")
		harness.Eventually(t, 30*time.Second, "the scheduler (or a finish) to promote or settle something", func() (bool, error) {
			return progress() > before, nil
		})
		sched.Kill()
	}
	runs := len(ids)
	s.Daemon(t, "scheduler-final", "scheduler", "--sweep-interval", "100ms")
	for _, id := range ids {
		s.WaitRuns(t, "SUCCEEDED", 60*time.Second, id)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = ANY($1::uuid[])`, "{"+strings.Join(ids, ",")+"}"); n != runs*4 {
		t.Fatalf("task rows = %d, want %d", n, runs*4)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE state <> 'SUCCEEDED' OR attempt <> 1`); n != 0 {
		t.Fatalf("%d tasks did not succeed on their first attempt", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM (SELECT task_run_id FROM task_events WHERE reason = 'claimed'
	                          GROUP BY task_run_id HAVING count(*) <> 1) x`); n != 0 {
		t.Fatalf("%d tasks were claimed more than once", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE reason = 'claimed'`); n != runs*4 {
		t.Fatalf("claims = %d, want %d (one per task)", n, runs*4)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM (SELECT task_run_id FROM outbox GROUP BY task_run_id HAVING count(*) <> 1) x`); n != 0 {
		t.Fatalf("%d tasks have more than one outbox row (double dispatch)", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n != 0 {
		t.Fatalf("%d outbox rows still pending", n)
	}
}

// workerRestarts is a supervisor loop in a test: start starts a worker
// called name, and restartTheDead starts the next one each time the
// latest has died by SIGKILL, counting the deaths (at most 10: more means
// a task loops).
type workerRestarts struct {
	t       *testing.T
	start   func(name string) *harness.Process
	workers []*harness.Process
	deaths  int
}

// next starts worker-N, N the number started before.
func (w *workerRestarts) next() {
	w.workers = append(w.workers, w.start(fmt.Sprintf("worker-%d", len(w.workers))))
}

// last is the latest worker started.
func (w *workerRestarts) last() *harness.Process { return w.workers[len(w.workers)-1] }

// restartTheDead starts the next worker when the latest has exited: an
// error when it exited otherwise than by SIGKILL (137), a failed test past
// 10 deaths.
func (w *workerRestarts) restartTheDead() error {
	if !w.last().Exited() {
		return nil
	}
	if code := crashWaitExit(w.t, w.last(), time.Second); code != 128+9 {
		return fmt.Errorf("worker-%d exited %d, want 137 (SIGKILL)", len(w.workers)-1, code)
	}
	w.deaths++
	if w.deaths > 10 {
		w.t.Fatalf("the workers died %d times: a task loops for ever", w.deaths)
	}
	w.next()
	return nil
}

// TestTaskThatKillsItsWorkerEveryAttemptEndsDead: mode 21. The task's shell
// command SIGKILLs its worker (the parent of the shell's parent, the shell
// supervisor) on every attempt; a
// supervisor loop in the test restarts the worker each time it dies. The
// attempt is counted at claim, so the reaper buries the task DEAD after
// max_attempts: it never loops forever.
func TestTaskThatKillsItsWorkerEveryAttemptEndsDead(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	s.Apply(t, `
name: crash-suicide
tasks:
  - name: killer
    handler: shell
    params: {command: ["sh", "-c", "kill -9 $(cut -d ' ' -f 4 /proc/$PPID/stat); sleep 5"]}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}
`)
	run := s.Trigger(t, "crash-suicide")
	workers := &workerRestarts{t: t, start: func(name string) *harness.Process {
		return s.Daemon(t, name, "worker", "--lease", "1s", "--allow-shell")
	}}
	workers.next()
	harness.Eventually(t, 60*time.Second, "the task to end DEAD", func() (bool, error) {
		if err := workers.restartTheDead(); err != nil {
			return false, err
		}
		c := crashTaskOf(t, db, run, "killer")
		return c.State == "DEAD", fmt.Errorf("task is %s attempt %d after %d worker deaths", c.State, c.Attempt, workers.deaths)
	})
	c := crashTaskOf(t, db, run, "killer")
	if c.Attempt != 3 || !strings.Contains(c.Error.String, "lease expired") {
		t.Fatalf("task %+v; want DEAD after attempt 3 with a lease-expired error", c)
	}
	if n := crashClaims(t, db, c.ID); n != 3 {
		t.Fatalf("claims = %d, want 3", n)
	}
	if workers.deaths != 3 {
		t.Fatalf("worker deaths = %d, want 3 (one per attempt)", workers.deaths)
	}
	s.WaitRuns(t, "FAILED", 10*time.Second, run)
	if w := workers.last(); w.Exited() {
		t.Fatalf("the last worker died too: %s", w.Logs())
	}
}

// TestExhaustedTaskIsRequeuedByOperatorAndSucceeds: mode 8. A shell task
// that fails until a marker file exists exhausts its attempts and ends
// DEAD (run FAILED); `ffctl dead requeue` refuses a malformed id (exit 2)
// and an unknown one (exit 1, "not found"), then requeues it with an
// audited reason; once the marker exists the task runs again and the run
// SUCCEEDED.
func TestExhaustedTaskIsRequeuedByOperatorAndSucceeds(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	s.Daemon(t, "worker", "worker", "--allow-shell")
	marker := filepath.Join(t.TempDir(), "ready")
	s.Apply(t, fmt.Sprintf(`
name: crash-requeue
tasks:
  - name: needs-marker
    handler: shell
    params: {command: ["sh", "-c", "test -f %s || { echo marker missing >&2; exit 3; }"]}
    retry: {max_attempts: 2, initial_backoff: 50ms, max_backoff: 50ms}
  - {name: after, handler: noop, depends_on: [needs-marker]}
`, marker))
	run := s.Trigger(t, "crash-requeue")
	s.WaitRuns(t, "FAILED", 30*time.Second, run)
	dead := crashTaskOf(t, db, run, "needs-marker")
	if dead.State != "DEAD" || dead.Attempt != 2 || !strings.Contains(dead.Error.String, "marker missing") {
		t.Fatalf("task %+v; want DEAD after 2 attempts with the command's stderr", dead)
	}
	if out, errOut, code := s.CLI(t, "dead", "requeue", "not-a-uuid", "--reason", "x"); code != 2 {
		t.Fatalf("requeue of a malformed id: exit %d, want 2\n%s%s", code, out, errOut)
	}
	unknown := uuid.NewString()
	if out, errOut, code := s.CLI(t, "dead", "requeue", unknown, "--reason", "x"); code != 1 || !strings.Contains(out+errOut, "not found") {
		t.Fatalf("requeue of an unknown id: exit %d, want 1 with \"not found\"\n%s%s", code, out, errOut)
	}
	if got := crashTaskOf(t, db, run, "needs-marker"); got.State != "DEAD" || got.Token != dead.Token {
		t.Fatalf("refused requeues changed the task: %+v", got)
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.MustCLI(t, "dead", "requeue", dead.ID, "--reason", "marker created")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, run)
	final := crashTaskOf(t, db, run, "needs-marker")
	if final.State != "SUCCEEDED" || final.Attempt != 1 {
		t.Fatalf("task %+v; want SUCCEEDED on the first attempt of its fresh budget", final)
	}
	var audited bool
	for _, e := range crashEvents(t, db, dead.ID) {
		if e.From.String == "DEAD" && e.To == "PENDING" && e.Reason.String == "marker created" && e.Actor != "" {
			audited = true
		}
	}
	if !audited {
		t.Fatalf("no audited DEAD -> PENDING event: %+v", crashEvents(t, db, dead.ID))
	}
	if n := crashClaims(t, db, dead.ID); n != 3 {
		t.Fatalf("claims = %d, want 3 (two failed attempts, one after the requeue)", n)
	}
}
