package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// skewProcessClock returns the process_clock a daemon logged when started
// with a debug clock skew.
func skewProcessClock(t *testing.T, p *harness.Process) time.Time {
	t.Helper()
	p.WaitForLog(t, "DEBUG process clock skewed", 20*time.Second)
	for _, line := range strings.Split(p.Logs(), "\n") {
		if !strings.Contains(line, "DEBUG process clock skewed") {
			continue
		}
		var rec struct {
			ProcessClock time.Time `json:"process_clock"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("decode %q: %v", line, err)
		}
		return rec.ProcessClock
	}
	t.Fatal("no skew log line")
	return time.Time{}
}

// TestSkewedDaemonsNeitherReapLiveLeasesNorDelayDeadOnes: mode 16. The
// scheduler and workers run with their process clock three hours fast, or
// three hours slow (the hidden --debug-clock-skew flag and its
// FLOWFORGE_DEBUG_CLOCK_SKEW variable shift every wall-clock reading they
// make). A task whose worker heartbeats a 2 s lease for 6 s is never reaped;
// a SIGKILLed worker's task is reaped after its lease expired on the
// database clock and within a few sweeps of it. Both hold because every
// compared timestamp is PostgreSQL's now().
func TestSkewedDaemonsNeitherReapLiveLeasesNorDelayDeadOnes(t *testing.T) {
	t.Parallel()
	for _, skew := range []string{"+3h", "-3h"} {
		t.Run(skew, func(t *testing.T) {
			t.Parallel()
			d, _ := time.ParseDuration(strings.TrimPrefix(skew, "+"))
			s := harness.NewStack(t, harness.StackOptions{})
			db := s.DB(t)
			sched := s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms", "--debug-clock-skew", skew)
			if off := skewProcessClock(t, sched).Sub(time.Now()); off < d-time.Minute || off > d+time.Minute {
				t.Fatalf("the scheduler's clock is off by %v, want %v", off, d)
			}
			s.Daemon(t, "publisher", "publisher")
			worker := func(name string) *harness.Process {
				return harness.StartProcess(t, name, s.Bin, []string{"daemon", "worker", "--id", name, "--lease", "2s"},
					append(s.Env(), "FLOWFORGE_DEBUG_CLOCK_SKEW="+skew))
			}
			victim := worker("victim")
			skewProcessClock(t, victim)
			s.Apply(t, `
name: skew-dead
tasks:
  - name: orphan
    handler: sleep
    params: {duration: 3s}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}
`)
			s.Apply(t, "name: skew-live\ntasks:\n  - {name: live, handler: sleep, params: {duration: 6s}}\n")
			deadRun := s.Trigger(t, "skew-dead")
			crashWaitTask(t, db, deadRun, "orphan", 30*time.Second, "RUNNING on the victim", func(c crashTask) bool {
				return c.State == "RUNNING" && c.Worker.String == "victim"
			})
			victim.Kill()
			orphan := crashTaskOf(t, db, deadRun, "orphan")
			if orphan.State != "RUNNING" || !orphan.Lease.Valid {
				t.Fatalf("orphan right after the kill: %+v", orphan)
			}
			worker("live")
			liveRun := s.Trigger(t, "skew-live")
			crashWaitTask(t, db, liveRun, "live", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })

			var reapedAt time.Time
			harness.Eventually(t, 20*time.Second, "the orphan to be reaped", func() (bool, error) {
				for _, e := range crashEvents(t, db, orphan.ID) {
					if e.From.String == "RUNNING" && e.To == "RETRYING" {
						reapedAt = e.At
						return true, nil
					}
				}
				return false, nil
			})
			late := reapedAt.Sub(orphan.Lease.Time)
			if late < 0 {
				t.Fatalf("the orphan was reaped %v before its lease expired (database clock)", -late)
			}
			if late > 3*time.Second {
				t.Fatalf("the orphan was reaped %v after its lease expired; want within a few 200ms sweeps", late)
			}
			t.Logf("skew %s: orphan reaped %v after its lease expired (database clock)", skew, late.Round(time.Millisecond))

			s.WaitRuns(t, "SUCCEEDED", 30*time.Second, liveRun)
			if err := leaseNoReap(t, db, liveRun); err != nil {
				t.Fatal(err)
			}
			if c := crashTaskOf(t, db, liveRun, "live"); c.Attempt != 1 || crashClaims(t, db, c.ID) != 1 {
				t.Fatalf("live task %+v; want one attempt, never reaped", c)
			}
			s.WaitRuns(t, "SUCCEEDED", 30*time.Second, deadRun)
			if c := crashTaskOf(t, db, deadRun, "orphan"); c.Attempt != 2 || c.Worker.String != "live" {
				t.Fatalf("orphan %+v; want retried once by the live worker", c)
			}
		})
	}
}
