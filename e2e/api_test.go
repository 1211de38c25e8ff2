package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// apiWorkflow fails its first task once (a retry), then runs a second.
const apiWorkflow = `name: api-order
tasks:
  - name: charge
    handler: fail
    params: {times: 1}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 200ms}
  - {name: ship, handler: noop, depends_on: [charge]}
`

// triggerPy runs scripts/examples/trigger.py with python3 against the API
// at addr with token and args, and returns its stdout, stderr and exit
// code (bounded by two minutes).
func triggerPy(t *testing.T, addr, token string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", append([]string{"../scripts/examples/trigger.py"}, args...)...)
	cmd.Env = append(os.Environ(), "FLOWFORGE_API_URL=http://"+addr, "FLOWFORGE_API_TOKEN="+token)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("python3 trigger.py: %v", err)
	}
	return o.String(), e.String(), 0
}

// TestAPythonProgramTriggersAndWaitsThroughTheHTTPAPI: the daemons run
// with the API (`daemon all --api-listen`); a token made with `ffctl token
// create` lets scripts/examples/trigger.py (Python's standard library
// only) trigger a run, wait for it through the long poll and print each
// task's result; the same idempotency key answers the same run; a viewer's
// token is refused (403) and, once revoked, the operator's is refused at
// once (401), both before anything is written.
func TestAPythonProgramTriggersAndWaitsThroughTheHTTPAPI(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is not installed")
		}
		t.Skip("python3 is not installed")
	}
	s := harness.NewStack(t, harness.StackOptions{})
	s.Apply(t, apiWorkflow) // before any worker is seen: a warning, not a refusal
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	d := s.Daemon(t, "all", "all", "--api-listen", addr, "--sweep-interval", "200ms")
	d.WaitForLog(t, "daemon: api listening", 30*time.Second)
	operator := strings.TrimSpace(s.MustCLI(t, "token", "create", "shop", "--role", "operator", "--expires", "1d"))
	viewer := strings.TrimSpace(s.MustCLI(t, "token", "create", "dashboard", "--role", "viewer"))

	out, errOut, code := triggerPy(t, addr, operator, "api-order", "--param", "order=42", "--idempotency-key", "order-42")
	var got struct {
		RunID   string                    `json:"run_id"`
		State   string                    `json:"state"`
		Results map[string]map[string]int `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("trigger.py: exit %d, %v\nstdout: %s\nstderr: %s", code, err, out, errOut)
	}
	if ship, ok := got.Results["ship"]; got.State != "SUCCEEDED" || got.Results["charge"]["attempt"] != 2 || !ok || len(ship) != 0 {
		t.Fatalf("trigger.py printed %s", out)
	}
	d.WaitForLog(t, `"actor":"api:shop"`, 10*time.Second)

	again, errOut, code := triggerPy(t, addr, operator, "api-order", "--param", "order=42", "--idempotency-key", "order-42")
	if code != 0 || !strings.Contains(again, got.RunID) {
		t.Fatalf("the same key again: exit %d\nstdout: %s\nstderr: %s", code, again, errOut)
	}
	runs := strings.Count(s.MustCLI(t, "run", "list", "--workflow", "api-order", "-o", "json"), `"id"`)

	_, errOut, code = triggerPy(t, addr, viewer, "api-order")
	if code != 1 || !strings.Contains(errOut, "403 forbidden: token dashboard has role viewer; this needs operator") {
		t.Fatalf("a viewer's trigger: exit %d\nstderr: %s", code, errOut)
	}
	s.MustCLI(t, "token", "revoke", "shop", "--reason", "rotated")
	_, errOut, code = triggerPy(t, addr, operator, "api-order", "--idempotency-key", "order-43")
	if code != 1 || !strings.Contains(errOut, "401 unauthenticated: the token was revoked") {
		t.Fatalf("a revoked token: exit %d\nstderr: %s", code, errOut)
	}
	if n := strings.Count(s.MustCLI(t, "run", "list", "--workflow", "api-order", "-o", "json"), `"id"`); n != runs || n != 1 {
		t.Fatalf("%d runs, want the one run (%d before the refusals)", n, runs)
	}
}
