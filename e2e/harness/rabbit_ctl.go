package harness

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SyncDurableState forces the node to write out its dets tables (`dets:sync`
// on every open table, via rabbitmqctl eval), in particular Ra's
// names.dets (ra_directory_reverse), which maps quorum queues to their Raft
// data directories. The test fails (t.Fatalf) on error.
//
// Why: with RabbitMQ 3.10.8 / Ra 2.2.0, dets tables are only flushed every
// 3 minutes (dets auto_save). A quorum queue declared less than ~3 minutes
// before a SIGKILL (Kill) comes back after Start as an empty, leaderless
// follower (log index 0, term 0; the broker log says "running pre init for 0
// registered servers"), and every operation on it times out. That is real
// broker behaviour, not a harness artefact. Tests that want freshly declared
// quorum queues to survive Kill should call SyncDurableState after
// declaring them and before Kill. Messages themselves are fsynced before
// publisher confirms and need no help.
func (r *Rabbit) SyncDurableState(t testing.TB) {
	t.Helper()
	out := r.Ctl(t, "eval", "[{T, dets:sync(T)} || T <- dets:all()].")
	if strings.Contains(out, "error") {
		t.Fatalf("harness: SyncDurableState %s: %s", r.Node, out)
	}
}

// Ctl runs `rabbitmqctl -n Node args...` (the CLI next to the server script,
// with the node's cookie) and returns its combined output. The test fails
// (t.Fatalf) if the command fails or takes longer than 2 minutes. Each call
// costs ~0.7 s (an Erlang VM starts).
func (r *Rabbit) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := r.cli("rabbitmqctl", args...)
	if err != nil {
		t.Fatalf("harness: rabbitmqctl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// Diagnostics runs `rabbitmq-diagnostics -n Node args...` like Ctl.
func (r *Rabbit) Diagnostics(t testing.TB, args ...string) string {
	t.Helper()
	out, err := r.cli("rabbitmq-diagnostics", args...)
	if err != nil {
		t.Fatalf("harness: rabbitmq-diagnostics %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// cli runs the RabbitMQ command-line tool next to the server script with
// `-n Node args...` in the node's environment (its cookie), bounded by 2
// minutes, and returns its combined output.
func (r *Rabbit) cli(tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.scriptDir, tool), append([]string{"-n", r.Node}, args...)...)
	cmd.Dir = r.Dir
	cmd.Env = r.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// SetMemoryAlarm raises (on) or clears (off) the node's memory alarm by
// setting vm_memory_high_watermark to 0.000001 (on) or back to the value it
// had before the last SetMemoryAlarm(true) (0.4 if unknown), then waits up to
// 30 s until the alarm is (or is no longer) reported by the node. While the
// alarm is on, publishing connections are blocked (connection.blocked). The
// test fails (t.Fatalf) on error.
func (r *Rabbit) SetMemoryAlarm(t testing.TB, on bool) {
	t.Helper()
	if on {
		if r.watermark == "" {
			out, err := r.cli("rabbitmqctl", "eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
			if f, perr := strconv.ParseFloat(strings.TrimSpace(out), 64); err == nil && perr == nil && f > 0.001 {
				r.watermark = strings.TrimSpace(out)
			}
		}
		r.Ctl(t, "set_vm_memory_high_watermark", "0.000001")
	} else {
		w := r.watermark
		if w == "" {
			w = "0.4"
		}
		r.Ctl(t, "set_vm_memory_high_watermark", w)
	}
	state := map[bool]string{true: "raised", false: "cleared"}[on]
	Eventually(t, 30*time.Second, "memory alarm "+state+" on "+r.Node, func() (bool, error) {
		out, err := r.cli("rabbitmqctl", "eval", "rabbit_alarm:get_local_alarms().")
		if err != nil {
			return false, err
		}
		has := strings.Contains(out, "resource_limit,memory")
		if has != on {
			return false, fmt.Errorf("local alarms: %s", strings.TrimSpace(out))
		}
		return true, nil
	})
}

// SetDiskAlarm raises (on) or clears the node's disk alarm: a free-disk
// limit far above any disk (set_disk_free_limit 100000GB), or the
// default 50MB back, and waits (up to 30 s) until the node reports the
// alarm raised or cleared. The node rechecks the free space on its own
// schedule, so the wait is that check's, not a fixed delay.
func (r *Rabbit) SetDiskAlarm(t testing.TB, on bool) {
	t.Helper()
	limit := "50MB"
	if on {
		limit = "100000GB"
	}
	r.Ctl(t, "set_disk_free_limit", limit)
	state := map[bool]string{true: "raised", false: "cleared"}[on]
	Eventually(t, 30*time.Second, "disk alarm "+state+" on "+r.Node, func() (bool, error) {
		out, err := r.cli("rabbitmqctl", "eval", "rabbit_alarm:get_local_alarms().")
		if err != nil {
			return false, err
		}
		if has := strings.Contains(out, "resource_limit,disk"); has != on {
			return false, fmt.Errorf("local alarms: %s", strings.TrimSpace(out))
		}
		return true, nil
	})
}
