package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/e2e/harness"
)

// TestHostileHandlerOutputIsStoredSafelyAndTheTaskFinishes: mode 22. Shell
// tasks print NUL bytes, invalid UTF-8 and a megabyte of text on stdout (and
// succeed) or stderr (and fail): every task still finishes — SUCCEEDED with
// a valid, bounded result, or DEAD with a valid, bounded error — and none
// is left RUNNING.
func TestHostileHandlerOutputIsStoredSafelyAndTheTaskFinishes(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	s.Daemon(t, "worker", "worker", "--allow-shell", "--concurrency", "4")
	cases := []struct {
		name    string
		script  string
		state   string
		contain string // expected in the stored result or error
	}{
		{"binary-ok", `printf 'nul\000here bad\377\376utf8 \033[31mred'`, "SUCCEEDED", "nul\uFFFDhere bad\uFFFD"},
		{"megabyte-ok", `head -c 1048576 /dev/zero | tr '\000' x; echo end`, "SUCCEEDED", "bytes dropped"},
		{"binary-fail", `printf 'nul\000here bad\377\376utf8' >&2; exit 7`, "DEAD", "exited with code 7"},
		{"megabyte-fail", `head -c 1048576 /dev/zero | tr '\000' y >&2; exit 9`, "DEAD", "exited with code 9"},
	}
	var wf strings.Builder
	wf.WriteString("name: output-hostile\ntasks:\n")
	for _, c := range cases {
		cmd, _ := json.Marshal([]string{"sh", "-c", c.script})
		wf.WriteString("  - name: " + c.name + "\n    handler: shell\n    params: {command: " + string(cmd) + "}\n    retry: {max_attempts: 1}\n")
	}
	s.Apply(t, wf.String())
	run := s.Trigger(t, "output-hostile")
	s.WaitRuns(t, "FAILED", 30*time.Second, run)
	harness.Eventually(t, 30*time.Second, "every task to finish", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND state NOT IN ('SUCCEEDED', 'DEAD')`, run)
		return n == 0, nil
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := crashTaskOf(t, db, run, c.name)
			if got.State != c.state || got.Lease.Valid {
				t.Fatalf("state %s (lease %v), want %s with no lease", got.State, got.Lease.Valid, c.state)
			}
			stored := got.Error.String
			limit := core.MaxErrorBytes + 64
			if c.state == "SUCCEEDED" {
				limit = core.MaxResultBytes
				var res struct {
					ExitCode int    `json:"exit_code"`
					Stdout   string `json:"stdout"`
				}
				if err := json.Unmarshal([]byte(got.Result.String), &res); err != nil {
					t.Fatalf("result is not the shell's JSON: %v\n%.200s", err, got.Result.String)
				}
				stored = res.Stdout
			}
			if !utf8.ValidString(stored) || strings.ContainsRune(stored, 0) {
				t.Fatalf("stored text is not clean UTF-8: %q", stored)
			}
			if len(got.Result.String) > limit || len(stored) > limit {
				t.Fatalf("stored %d bytes (result %d), limit %d", len(stored), len(got.Result.String), limit)
			}
			if !strings.Contains(stored, c.contain) {
				t.Fatalf("stored text lacks %q: %.300q", c.contain, stored)
			}
			if n := crashClaims(t, db, got.ID); n != 1 {
				t.Fatalf("claims = %d, want 1", n)
			}
		})
	}
}
