package e2e

// The shell handler and inputs too large for a command's environment
// (issue 11): run params may be 1 MiB, but Linux takes at most 128 KiB per
// environment variable.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestShellTaskReadsA300KiBParamAndAnOversizedEnvIsRefusedAtApply runs, on
// a real stack, a shell task of a run whose params hold a 300 KiB value (it
// used to fail every attempt with "argument list too long" and be retried
// to DEAD): it reads the whole document from $FLOWFORGE_PARAMS_FILE and from
// stdin and succeeds on its first attempt. A task whose own params.env
// holds a 200 KiB value cannot be run by exec at all: `workflow apply`
// refuses it (exit 2, nothing stored) with an error saying where large
// values go. (A worker given such a task anyway fails it permanently:
// TestShellRefusesWhatExecCannotTakeAsPermanent.)
func TestShellTaskReadsA300KiBParamAndAnOversizedEnvIsRefusedAtApply(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "all", "all", "--allow-shell")
	bigenv := fmt.Sprintf(`
name: big-env
tasks:
  - name: bigenv
    handler: shell
    params: {command: ["true"], env: {BIG: "%s"}}
`, strings.Repeat("e", 200<<10))
	_, errOut, code := s.CLIWithInput(t, bigenv, "workflow", "apply", "-f", "-")
	if code != 2 || !strings.Contains(errOut, "params.env BIG") || !strings.Contains(errOut, "FLOWFORGE_PARAMS_FILE") {
		t.Fatalf("apply of a 200 KiB params.env: exit %d, stderr %q; want exit 2 naming params.env BIG and the file", code, errOut)
	}
	if _, _, code := s.CLI(t, "workflow", "show", "big-env"); code != 1 {
		t.Fatalf("workflow show big-env: exit %d; the refused workflow must not be stored", code)
	}
	s.Apply(t, `
name: big-params
fail_fast: false
tasks:
  - name: file
    handler: shell
    params: {command: [sh, -c, 'tr -cd p < "$FLOWFORGE_PARAMS_FILE" | wc -c']}
    retry: {max_attempts: 3, initial_backoff: 50ms, max_backoff: 50ms}
  - name: stdin
    handler: shell
    params: {command: [sh, -c, 'tr -cd p | wc -c'], stdin: params}
    retry: {max_attempts: 3, initial_backoff: 50ms, max_backoff: 50ms}
`)
	const blob = 300 << 10 // "p" occurs nowhere else in the params
	params, _ := json.Marshal(map[string]string{"blob": strings.Repeat("p", blob)})
	out, errOut, code := s.CLIWithInput(t, string(params), "run", "trigger", "big-params", "--params-file", "-")
	if code != 0 {
		t.Fatalf("trigger: exit %d: %s", code, errOut)
	}
	r := s.WaitRunTerminal(t, strings.TrimSpace(out), 60*time.Second)
	for _, x := range r.Tasks {
		var res struct {
			Stdout string `json:"stdout"`
		}
		_ = json.Unmarshal(x.Result, &res)
		switch x.Name {
		case "file", "stdin":
			if x.State != "SUCCEEDED" || x.Attempt != 1 || strings.TrimSpace(res.Stdout) != fmt.Sprint(blob) {
				t.Errorf("%s: %s after attempt %d, stdout %q (error %v); want SUCCEEDED at once, reading all %d bytes of the blob", x.Name, x.State, x.Attempt, res.Stdout, deref(x.Error), blob)
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
