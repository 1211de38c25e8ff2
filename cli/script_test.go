package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// scriptEnv returns a PATH whose "ffctl" is this test binary acting as
// ffctl, and the environment pointing it at the harness's database.
func (h *harness) scriptEnv() []string {
	h.t.Helper()
	self, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	bin := h.t.TempDir()
	wrapper := "#!/bin/sh\n" + beFFCTL + "=1 exec '" + self + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "ffctl"), []byte(wrapper), 0o755); err != nil {
		h.t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOWFORGE_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FLOWFORGE_DATABASE_URL="+h.url)
}

// startScript runs scripts/examples/requeue-dead.sh with args in the
// background.
func (h *harness) startScript(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	h.t.Helper()
	cmd := exec.CommandContext(h.ctx, "sh", append([]string{filepath.Join("..", "scripts", "examples", "requeue-dead.sh")}, args...)...)
	cmd.Env = h.scriptEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	return cmd, &out, &errOut
}

// awaitRun returns the id of the one run of workflow once it exists.
func (h *harness) awaitRun(workflow string) uuid.UUID {
	h.t.Helper()
	var id uuid.UUID
	eventually(h.t, 30*time.Second, "the script's run", func() bool {
		var s string
		if err := h.db.QueryRowContext(h.ctx, `SELECT id FROM workflow_runs WHERE workflow_name = $1`, workflow).Scan(&s); err != nil {
			return false
		}
		id = uuid.MustParse(s)
		return true
	})
	return id
}

func TestRequeueDeadScript(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	cmd, out, errOut := h.startScript("twostep", "requeued by the test")

	// Play the daemons: a succeeds, b dies, the scheduler settles the run.
	runID := h.awaitRun("twostep")
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	b := h.taskID(runID, "b")
	h.kill(b, "remote said 503")
	h.advance()

	if err := cmd.Wait(); err != nil {
		t.Fatalf("script: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	res := decode[[]requeueOut](t, out.String())
	if len(res) != 1 || res[0].ID != b.String() || !res[0].Requeued {
		t.Fatalf("script output: %+v\nstderr:\n%s", res, errOut)
	}
	if st := h.state(b); st != core.TaskPending {
		t.Fatalf("b is %s after the script, want PENDING", st)
	}
	d, err := h.s.GetTask(h.ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if ev := d.Events[len(d.Events)-1]; ev.ToState != "PENDING" || ev.Reason == nil || *ev.Reason != "requeued by the test" || !strings.HasPrefix(ev.Actor, "cli:") {
		t.Fatalf("audit row: %+v", ev)
	}
}

func TestRequeueDeadScriptWhenTheRunSucceeds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: fine\ntasks:\n  - {name: a, handler: noop}\n")
	cmd, out, errOut := h.startScript("fine")
	runID := h.awaitRun("fine")
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("script: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if out.String() != "run "+runID.String()+" SUCCEEDED\n" {
		t.Fatalf("script output %q", out)
	}
}

func TestRequeueDeadScriptUnknownWorkflow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cmd, out, errOut := h.startScript("nope")
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("script: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if !strings.Contains(errOut.String(), `workflow "nope": not found`) {
		t.Fatalf("stderr: %s", errOut)
	}
}
