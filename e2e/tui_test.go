package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestTUIRequeueDeadTaskFromDashboard drives the real ffctl tui in tmux
// against a live stack: a shell task that fails while a marker file is
// absent goes DEAD (one attempt allowed); the test creates the file, opens
// the DEAD screen, marks the task, presses r, types a reason and confirms;
// the run then reaches SUCCEEDED and the requeue is audited with the reason.
func TestTUIRequeueDeadTaskFromDashboard(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tmux is not installed")
		}
		t.Skip("tmux is not installed")
	}
	dir := t.TempDir()
	st := harness.NewStack(t, harness.StackOptions{})
	ffctl, dbURL := st.Bin, st.DatabaseURL
	ff := func(args ...string) (string, error) {
		out, errOut, code := st.CLI(t, args...)
		if code != 0 {
			return out, fmt.Errorf("ffctl %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out, nil
	}
	marker := filepath.Join(dir, "marker")
	def := map[string]any{
		"name": "tui-e2e",
		"tasks": []any{
			map[string]any{"name": "flaky", "handler": "shell",
				"params": map[string]any{"command": []string{"test", "-f", marker}},
				"retry":  map[string]any{"max_attempts": 1}},
			map[string]any{"name": "after", "handler": "noop", "depends_on": []string{"flaky"}},
		},
	}
	b, _ := json.Marshal(def)
	st.Apply(t, string(b))
	st.Daemon(t, "all", "all", "--allow-shell")

	out, err := ff("run", "trigger", "tui-e2e")
	if err != nil {
		t.Fatal(err)
	}
	runID := strings.TrimSpace(out)

	// Wait for the DEAD task.
	var taskID string
	tuiEventually(t, 60*time.Second, "the task to go DEAD", func() (bool, string) {
		out, err := ff("dead", "list", "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var dead []struct {
			ID    string `json:"id"`
			RunID string `json:"run_id"`
		}
		if err := json.Unmarshal([]byte(out), &dead); err != nil {
			return false, err.Error()
		}
		for _, d := range dead {
			if d.RunID == runID {
				taskID = d.ID
				return true, ""
			}
		}
		return false, out
	})
	// Fix the cause before requeueing.
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// The dashboard, in a tmux server of its own.
	sock := "fftui-" + tuiRandom()
	tm := func(args ...string) (string, error) {
		out, err := exec.Command("tmux", append([]string{"-L", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	shell := fmt.Sprintf("env FLOWFORGE_DATABASE_URL=%s NO_COLOR=1 %s tui --refresh 300ms 2>%s",
		tuiQuote(dbURL), tuiQuote(ffctl), tuiQuote(filepath.Join(dir, "tui.stderr")))
	if out, err := tm("new-session", "-d", "-s", "tui", "-x", "100", "-y", "30", shell); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	screen := func() string {
		out, _ := tm("capture-pane", "-p", "-t", "tui")
		return out
	}
	waitScreen := func(what string, want ...string) {
		t.Helper()
		tuiEventually(t, 20*time.Second, what, func() (bool, string) {
			s := screen()
			for _, w := range want {
				if !strings.Contains(s, w) {
					return false, s
				}
			}
			return true, ""
		})
	}
	keys := func(k ...string) {
		t.Helper()
		if out, err := tm(append([]string{"send-keys", "-t", "tui"}, k...)...); err != nil {
			t.Fatalf("send-keys %v: %v\n%s", k, err, out)
		}
	}
	waitScreen("the Runs screen", "[1 Runs]", "tui-e2e", "FAILED")
	keys("5")
	waitScreen("the DEAD screen with the task", "[5 DEAD]", "tui-e2e", "flaky", taskID[:8])
	keys("Space")
	waitScreen("the task marked", "1 marked")
	keys("r")
	waitScreen("the confirmation", "Requeue task "+taskID[:8], "reason:")
	keys("-l", "marker created by e2e")
	keys("Enter")
	waitScreen("the requeue reported", "requeued 1 of 1")

	tuiEventually(t, 60*time.Second, "the run to succeed", func() (bool, string) {
		out, err := ff("run", "show", runID, "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var r struct {
			State string `json:"state"`
		}
		_ = json.Unmarshal([]byte(out), &r)
		return r.State == "SUCCEEDED", out
	})

	// Audited like the CLI's requeue: the reason, and a cli: actor.
	out, err = ff("task", "show", taskID, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var task struct {
		Events []struct {
			FromState *string `json:"from_state"`
			ToState   string  `json:"to_state"`
			Actor     string  `json:"actor"`
			Reason    *string `json:"reason"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &task); err != nil {
		t.Fatal(err)
	}
	audited := false
	for _, e := range task.Events {
		if e.FromState != nil && *e.FromState == "DEAD" && e.ToState == "PENDING" && e.Reason != nil && *e.Reason == "marker created by e2e" && strings.HasPrefix(e.Actor, "cli:") {
			audited = true
		}
	}
	if !audited {
		t.Errorf("no audited DEAD -> PENDING event with the reason:\n%s", out)
	}

	// The run shows SUCCEEDED on the Runs screen too; q quits cleanly.
	keys("1")
	waitScreen("the run SUCCEEDED on screen", "[1 Runs]", "SUCCEEDED")
	keys("q")
	tuiEventually(t, 10*time.Second, "the dashboard to exit", func() (bool, string) {
		out, err := tm("has-session", "-t", "tui")
		return err != nil, out
	})
	if b, _ := os.ReadFile(filepath.Join(dir, "tui.stderr")); len(b) > 0 {
		t.Errorf("ffctl tui wrote to stderr: %s", b)
	}
}

// tuiEventually polls cond every 100ms until it holds or timeout passes.
func tuiEventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen:\n%s", timeout, what, last)
		}
		<-tick.C
	}
}

func tuiRandom() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tuiQuote quotes s for sh.
func tuiQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func tuiTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
