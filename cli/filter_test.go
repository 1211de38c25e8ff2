package cli_test

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// TestAGivenFilterMustSelectSomething: a filter flag that is given empty,
// blank, as the nil run id or as a zero age is a usage error (exit 2) that
// writes nothing — never "no filter". Every filter flag of every command.
func TestAGivenFilterMustSelectSomething(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.deadRun()
	const nilRun = "00000000-0000-0000-0000-000000000000"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"dead list --run empty", []string{"dead", "list", "--run", ""}, "--run is empty"},
		{"dead list --run blank", []string{"dead", "list", "--run", "  "}, "--run is empty"},
		{"dead list --run nil", []string{"dead", "list", "--run", nilRun}, "nil UUID"},
		{"dead list --workflow empty", []string{"dead", "list", "--workflow", ""}, "--workflow is empty"},
		{"dead list --older-than zero", []string{"dead", "list", "--older-than", "0s"}, `--older-than "0s": must be positive`},
		{"dead requeue --all --run empty", []string{"dead", "requeue", "--all", "--run", "", "--reason", "x", "--yes"}, "--run is empty"},
		{"dead requeue --all --run nil", []string{"dead", "requeue", "--all", "--run", nilRun, "--reason", "x", "--yes"}, "nil UUID"},
		{"dead requeue --all --workflow empty", []string{"dead", "requeue", "--all", "--workflow", "", "--reason", "x", "--yes"}, "--workflow is empty"},
		{"dead requeue --all --older-than zero", []string{"dead", "requeue", "--all", "--older-than", "0s", "--reason", "x", "--yes"}, "must be positive"},
		{"run list --workflow empty", []string{"run", "list", "--workflow", ""}, "--workflow is empty"},
		{"run list --state empty", []string{"run", "list", "--state", ""}, "--state is empty"},
		{"run list --before empty", []string{"run", "list", "--before", ""}, "--before is empty"},
		{"run show nil", []string{"run", "show", nilRun}, "nil UUID"},
		{"task show nil", []string{"task", "show", nilRun}, "nil UUID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ff(tc.args...)
			expect(t, r, 2, tc.want)
			if r.stdout != "" {
				t.Fatalf("a refused command printed %q", r.stdout)
			}
			h.assertUnchanged(before)
		})
	}
}

// TestAScriptWhoseRunVariableIsEmptyRequeuesNothing is the hazard as a
// script meets it: the run id comes from a variable that came out empty.
func TestAScriptWhoseRunVariableIsEmptyRequeuesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, dead := h.deadRun()
	h.apply("name: solo\ntasks:\n  - {name: only, handler: fail}\n")
	other := h.taskID(h.trigger("solo"), "only")
	h.kill(other, "nope")
	before := h.snapshot()
	cmd := exec.CommandContext(h.ctx, "sh", "-c", `run=""; ffctl dead requeue --all --run "$run" --reason x --yes`)
	cmd.Env = h.scriptEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("script: %v, want exit 2\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "--run is empty") {
		t.Fatalf("stderr: %s", errOut.String())
	}
	h.assertUnchanged(before)
	if st := h.state(dead); st != core.TaskDead {
		t.Fatalf("task %s is %s, want still DEAD", dead, st)
	}
	if st := h.state(other); st != core.TaskDead {
		t.Fatalf("task %s is %s, want still DEAD", other, st)
	}
}
