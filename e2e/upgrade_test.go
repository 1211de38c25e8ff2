package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 45: a rolling deploy, old and new binaries against one schema.

// upgradeOldCommit is the "old" release of the rolling-upgrade test: the
// first commit with the schema compatibility window and the tolerant
// dispatch decoder. It must stay reachable (the branch is merged with
// --no-ff; CI needs a full clone).
const upgradeOldCommit = "b4c99b7e1584396410cf3b5fba57592ef77cf7f9"

// upgradeBuildTimeout bounds the build of the old binary.
const upgradeBuildTimeout = 5 * time.Minute

// upgradeBuildOld builds cli/ffctl from commit (exported with git archive
// into a temporary directory; the module and build caches are shared) and
// returns the binary's path. A commit missing from the clone fails the test.
func upgradeBuildOld(t *testing.T, commit string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), upgradeBuildTimeout)
	defer cancel()
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	root := run(".", nil, "git", "rev-parse", "--show-toplevel")
	if err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Fatalf("the pinned old release %s is not in this clone (%v): the rolling-upgrade test needs the full history (git fetch --unshallow)", commit, err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "src.tar")
	run(root, nil, "git", "archive", "--format=tar", "-o", tarball, commit)
	run(src, nil, "tar", "-xf", tarball)
	start := time.Now()
	bin := filepath.Join(dir, "ffctl-old")
	run(src, []string{"GOFLAGS=-mod=mod", "GOWORK=off"}, "go", "build", "-trimpath", "-o", bin, "./cli/ffctl")
	t.Logf("built the old ffctl from %.12s in %v", commit, time.Since(start).Round(time.Millisecond))
	return bin
}

// upgradeTrigger triggers runs of a workflow in the background, one every
// interval, with the binary of whichever stack use last chose, until stop.
type upgradeTrigger struct {
	mu    sync.Mutex
	stack *harness.Stack
	ids   []string
	errs  []string
	stop  chan struct{}
	done  chan struct{}
}

func startUpgradeTrigger(s *harness.Stack, workflow string, interval time.Duration) *upgradeTrigger {
	tr := &upgradeTrigger{stack: s, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
			tr.mu.Lock()
			st := tr.stack
			tr.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, st.Bin, "run", "trigger", workflow)
			cmd.Env = append(os.Environ(), st.Env()...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			cancel()
			tr.mu.Lock()
			if err != nil {
				tr.errs = append(tr.errs, fmt.Sprintf("%s run trigger: %v: %s", filepath.Base(st.Bin), err, errOut.String()))
			} else {
				tr.ids = append(tr.ids, strings.TrimSpace(out.String()))
			}
			tr.mu.Unlock()
		}
	}()
	return tr
}

// use makes later triggers run with s's binary.
func (tr *upgradeTrigger) use(s *harness.Stack) {
	tr.mu.Lock()
	tr.stack = s
	tr.mu.Unlock()
}

// finish stops triggering and returns the ids triggered and the failures.
func (tr *upgradeTrigger) finish() ([]string, []string) {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.ids...), append([]string(nil), tr.errs...)
}

// waitFlowing waits until n more runs than now have succeeded: runs are
// flowing through whatever daemons are up. A failed trigger (the CLI
// refusing the schema) fails the test at once.
func (tr *upgradeTrigger) waitFlowing(t *testing.T, db *sql.DB, n int, what string) {
	t.Helper()
	const q = `SELECT count(*) FROM workflow_runs WHERE state = 'SUCCEEDED'`
	base := harness.QueryInt(t, db, q)
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("%d more runs to succeed %s", n, what), func() (bool, error) {
		tr.mu.Lock()
		errs := append([]string(nil), tr.errs...)
		tr.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("%s: %d triggers failed, the first: %s", what, len(errs), errs[0])
		}
		got := harness.QueryInt(t, db, q) - base
		return got >= n, fmt.Errorf("%d more succeeded", got)
	})
}

// upgradeStop sends SIGTERM and requires a clean exit (0) within 30 s.
func upgradeStop(t *testing.T, p *harness.Process) {
	t.Helper()
	if p.Exited() {
		t.Fatalf("%s exited before it was replaced:\n%s", p.Name, p.Logs())
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.Name, err)
	}
	code, err := p.Wait(30 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("%s after SIGTERM: exit %d, %v\n%s", p.Name, code, err, p.Logs())
	}
}

// TestARollingUpgradeUnderLoadLosesNothing migrates a stack with an old
// ffctl (built from upgradeOldCommit), runs an old scheduler, publisher and
// two old workers while runs are triggered continuously, then lands the new
// binary's `ffctl migrate` under them (old daemons keep running, and an old
// worker started afterwards accepts the newer schema), replaces the
// scheduler and the publisher, and replaces the workers one by one
// (SIGTERM while each holds a task, then a new one). Every triggered run succeeds, every task ran
// exactly once (one claim, one execution, attempt 1), old and new workers
// both ran tasks, and nothing was dead-lettered or left queued.
func TestARollingUpgradeUnderLoadLosesNothing(t *testing.T) {
	oldBin := upgradeBuildOld(t, upgradeOldCommit)
	old := harness.NewStack(t, harness.StackOptions{Bin: oldBin}) // migrated by the old binary
	cur := *old
	cur.Bin = harness.BuildFFCTL(t)
	t.Logf("old: %s", strings.ReplaceAll(old.MustCLI(t, "version"), "\n", "; "))
	t.Logf("new: %s", strings.ReplaceAll(cur.MustCLI(t, "version"), "\n", "; "))

	count := filepath.Join(t.TempDir(), "executions")
	old.Apply(t, "name: rolling\ntasks:\n"+
		"  - {name: a, handler: shell, params: {command: "+dispatchCountCommand(count)+"}}\n"+
		"  - {name: b, handler: sleep, params: {duration: 300ms}, depends_on: [a]}\n")
	worker := func(s *harness.Stack, id string) *harness.Process {
		p := s.Daemon(t, id, "worker", "--allow-shell", "--concurrency", "4", "--id", id)
		p.WaitForLog(t, "worker: started", 30*time.Second)
		return p
	}
	oldSched := old.Daemon(t, "old-scheduler", "scheduler", "--id", "old-scheduler")
	oldPub := old.Daemon(t, "old-publisher", "publisher", "--id", "old-publisher")
	workers := []*harness.Process{worker(old, "old-worker-1"), worker(old, "old-worker-2")}
	db := old.DB(t)
	tr := startUpgradeTrigger(old, "rolling", 150*time.Millisecond)
	t.Cleanup(func() { tr.finish() })
	tr.waitFlowing(t, db, 3, "on the old release")

	// The new release's migration lands under the old daemons.
	t.Logf("new ffctl migrate: %s", strings.TrimSpace(cur.MustCLI(t, "migrate")))
	w, err := store.EmbeddedSchemaWindow()
	if err != nil {
		t.Fatal(err)
	}
	st, err := old.Store.SchemaState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != w.Latest {
		t.Fatalf("after the new migrate the database is at %d, want the new binary's %d", st.Version, w.Latest)
	}
	tr.waitFlowing(t, db, 3, "with old daemons on the migrated schema")
	for _, p := range append([]*harness.Process{oldSched, oldPub}, workers...) {
		if p.Exited() {
			t.Fatalf("%s exited after the migration:\n%s", p.Name, p.Logs())
		}
	}
	// An old daemon that restarts now must accept the newer schema.
	workers = append(workers, worker(old, "old-worker-3"))
	tr.waitFlowing(t, db, 3, "with an old worker started after the migration")

	// The new scheduler and publisher take over; the CLI is the new one.
	tr.use(&cur)
	newSched := cur.Daemon(t, "new-scheduler", "scheduler", "--id", "new-scheduler")
	newSched.WaitForLog(t, "scheduler: started", 30*time.Second)
	upgradeStop(t, oldSched)
	newPub := cur.Daemon(t, "new-publisher", "publisher", "--id", "new-publisher")
	newPub.WaitForLog(t, "publisher: started", 30*time.Second)
	upgradeStop(t, oldPub)
	tr.waitFlowing(t, db, 3, "with the new scheduler and publisher and old workers")

	// Workers are replaced one by one.
	var fresh []*harness.Process
	for i, p := range workers {
		// Stop it while it holds a task, so the graceful stop is exercised.
		// Once a new worker has bound its handlers' queues (routing by
		// handler, mode 115), the new publisher routes every dispatch of
		// those handlers there, and an old worker, which consumes only the
		// shared queue, gets none: it idles until it is stopped (the
		// upgrade note in docs/operating.md: replace the publisher after
		// the workers to keep old workers fed).
		if len(fresh) == 0 {
			harness.Eventually(t, 20*time.Second, p.Name+" to hold a RUNNING task", func() (bool, error) {
				return harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE state = 'RUNNING' AND worker_id = $1`, p.Name) > 0, nil
			})
		}
		upgradeStop(t, p)
		if i < 2 {
			fresh = append(fresh, worker(&cur, fmt.Sprintf("new-worker-%d", i+1)))
		}
		tr.waitFlowing(t, db, 2, "after replacing "+p.Name)
	}

	ids, errs := tr.finish()
	if len(errs) > 0 {
		t.Fatalf("%d triggers failed, the first: %s", len(errs), errs[0])
	}
	t.Logf("%d runs triggered across the upgrade", len(ids))
	old.WaitRuns(t, "SUCCEEDED", 60*time.Second, ids...)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs`); n != len(ids) {
		t.Fatalf("%d runs in the database, %d triggered", n, len(ids))
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE state <> 'SUCCEEDED' OR attempt <> 1`); n != 0 {
		t.Fatalf("%d tasks did not succeed on their first attempt", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs`); n != 2*len(ids) {
		t.Fatalf("%d task runs, want %d", n, 2*len(ids))
	}
	dispatchAssertClaimedOnce(t, db)
	ex := dispatchExecutions(t, count)
	for _, id := range ids {
		if ex[id] != 1 {
			t.Errorf("run %s: task a ran %d times, want once", id, ex[id])
		}
	}
	if len(ex) != len(ids) {
		t.Errorf("task a ran for %d runs, %d triggered", len(ex), len(ids))
	}
	for _, prefix := range []string{"old-worker-", "new-worker-"} {
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE to_state = 'RUNNING' AND worker_id LIKE $1`, prefix+"%"); n == 0 {
			t.Errorf("no task ran on a %s*", prefix)
		}
	}
	for _, q := range []string{old.Queue, broker.DeadLetterQueue(old.Queue)} {
		if n := old.Messages(t, q); n != 0 {
			t.Errorf("queue %s holds %d messages, want 0", q, n)
		}
	}
	for _, p := range append(append([]*harness.Process{newSched, newPub}, workers...), fresh...) {
		if strings.Contains(p.Logs(), "rejected a message that is not a dispatch") {
			t.Errorf("%s dead-lettered a dispatch:\n%s", p.Name, p.Logs())
		}
	}
	for _, p := range append([]*harness.Process{newSched, newPub}, fresh...) {
		if p.Exited() {
			t.Errorf("%s exited:\n%s", p.Name, p.Logs())
		}
	}
}

// TestADispatchWithAFieldFromTheFutureRunsTheTask publishes the outbox's
// dispatch as a newer scheduler might write it, with an extra field and a
// higher version ("v"): the worker (the built binary) runs the task
// instead of dead-lettering the message. No publisher runs, so the task
// can only have run from that message.
func TestADispatchWithAFieldFromTheFutureRunsTheTask(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, "name: future\ntasks:\n  - {name: a, handler: shell, params: {command: "+dispatchCountCommand(count)+"}}\n")
	id := s.Trigger(t, "future") // READY with its outbox row; no publisher runs
	payloads := dispatchPayloads(t, s.DB(t))
	if len(payloads) != 1 {
		t.Fatalf("%d outbox rows, want 1", len(payloads))
	}
	var msg map[string]any
	if err := json.Unmarshal(payloads[0], &msg); err != nil {
		t.Fatal(err)
	}
	if v, ok := msg["v"].(float64); !ok || v != core.DispatchVersion {
		t.Fatalf("the outbox's payload %s has v %v, want %d", payloads[0], msg["v"], core.DispatchVersion)
	}
	msg["v"] = core.DispatchVersion + 1
	msg["future_field"] = 1
	body, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	dispatchPublish(t, s, body)
	s.Daemon(t, "scheduler", "scheduler")
	w := s.Daemon(t, "worker", "worker", "--allow-shell")
	if r := s.WaitRunTerminal(t, id, 20*time.Second); r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED", r.State)
	}
	if ex := dispatchExecutions(t, count); ex[id] != 1 || len(ex) != 1 {
		t.Fatalf("executions %v, want one", ex)
	}
	if strings.Contains(w.Logs(), "rejected a message that is not a dispatch") {
		t.Fatalf("the worker rejected the message:\n%s", w.Logs())
	}
	if n := s.Messages(t, broker.DeadLetterQueue(s.Queue)); n != 0 {
		t.Fatalf("dead-letter queue holds %d messages, want 0", n)
	}
}
