package cli_test

import (
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/daemon/logtest"
)

// TestCtrlCDuringAWaitLeavesTheRunAndExits130 runs this test binary as a
// real ffctl process, waits until it is polling the run (its database
// session, named by a unique application_name, has read the run), sends
// it a real SIGINT
// and checks that it says the run continues and how to wait again, exits
// 130, and leaves every row as it was (issue 11: only the daemon handled
// signals, so ctrl-C killed the wait with no word).
func TestCtrlCDuringAWaitLeavesTheRunAndExits130(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: slow\ntasks:\n  - {name: a, handler: noop}\n")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// args returns the command and the run it waits for (uuid.Nil: the
		// run it triggers).
		args func() ([]string, uuid.UUID)
	}{
		{"run wait", func() ([]string, uuid.UUID) {
			id := h.trigger("slow")
			return []string{"run", "wait", id.String()[:8]}, id
		}},
		{"run trigger --wait", func() ([]string, uuid.UUID) {
			return []string{"run", "trigger", "slow", "--wait", "-o", "json"}, uuid.Nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, runID := tc.args()
			app := "ffctl-sigint-" + uuid.NewString()[:8]
			u, err := url.Parse(h.url)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("application_name", app)
			u.RawQuery = q.Encode()
			cmd := exec.CommandContext(h.ctx, self, append([]string{"--database-url", u.String()}, args...)...)
			cmd.Env = append(os.Environ(), beFFCTL+"=1")
			var out, errOut logtest.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "ffctl polling the run", func() bool {
				var n int
				// The run's read as it begins: pg_stat_activity keeps a
				// query's first track_activity_query_size bytes (1 KiB), and
				// the read is longer than that.
				err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM pg_stat_activity
 WHERE application_name = $1 AND query LIKE 'SELECT r.id, r.workflow_name, r.workflow_version, r.state%'`, app).Scan(&n)
				return err == nil && n > 0
			})
			if runID == uuid.Nil {
				// trigger --wait names the whole run id before it waits.
				eventually(t, 30*time.Second, "the run id on stderr", func() bool {
					var s string
					err := h.db.QueryRowContext(h.ctx, `SELECT id FROM workflow_runs WHERE workflow_name = 'slow' ORDER BY created_at DESC LIMIT 1`).Scan(&s)
					if err == nil {
						runID = uuid.MustParse(s)
					}
					return err == nil && strings.Contains(errOut.String(), "run "+s+" triggered; waiting")
				})
			}
			before := h.snapshot()
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Fatalf("ffctl %v after SIGINT: %v, want exit 130\nstdout: %s\nstderr: %s", args, err, out.String(), errOut.String())
			}
			want := "ffctl: interrupted; run " + runID.String() + " continues (ffctl run wait " + runID.String() + ")\n"
			if !strings.HasSuffix(errOut.String(), want) || out.Len() != 0 {
				t.Fatalf("after SIGINT:\nstdout: %q\nstderr: %q\nwant stderr ending %q", out.String(), errOut.String(), want)
			}
			h.assertUnchanged(before)
			if r := h.run(runID); (r.State != "PENDING" && r.State != "RUNNING") || r.CancelRequestedAt != nil {
				t.Fatalf("run after an interrupted wait: %s, cancel requested %v", r.State, r.CancelRequestedAt)
			}
		})
	}
}
