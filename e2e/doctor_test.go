package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestDoctorFindsNothingAfterRealRunsAndReportsASkewedDaemon: modes 125
// and 126 with real daemons. Runs taken to their end by a scheduler,
// publisher and worker leave nothing for `ffctl doctor` to find (exit 0);
// a worker started with its clock an hour fast (the hidden
// --debug-clock-skew) is then reported from its heartbeat, by its id, and
// the others are not.
func TestDoctorFindsNothingAfterRealRunsAndReportsASkewedDaemon(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms")
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker")
	s.Apply(t, "name: two\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a]}\n")
	runs := []string{s.Trigger(t, "two"), s.Trigger(t, "two"), s.Trigger(t, "two")}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, runs...)
	harness.Eventually(t, 20*time.Second, "a clean doctor run", func() (bool, error) {
		out, _, code := s.CLI(t, "doctor")
		return code == 0 && out == "doctor: nothing found\n", nil
	})

	skewed := s.Daemon(t, "skewed", "worker", "--id", "skewed", "--debug-clock-skew", "+1h")
	skewProcessClock(t, skewed)
	var out string
	harness.Eventually(t, 20*time.Second, "doctor to report the skewed worker", func() (bool, error) {
		var code int
		out, _, code = s.CLI(t, "doctor")
		return code == 1 && strings.Contains(out, "clock_offset worker=skewed: worker daemon on "), nil
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	m := regexp.MustCompile(`its clock is ([0-9.]+)s ahead of the database's`).FindStringSubmatch(out)
	if len(lines) != 1 || m == nil {
		t.Fatalf("doctor: %q, want one clock_offset line for the skewed worker, ahead of the database", out)
	}
	if off, err := strconv.ParseFloat(m[1], 64); err != nil || off < 3595 || off > 3605 {
		t.Fatalf("doctor: offset %q (%v), want an hour", m[1], err)
	}
}
