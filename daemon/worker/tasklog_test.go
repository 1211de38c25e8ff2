package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/handlers"
)

// awaitLogLines polls (with a deadline) until the task run's log holds
// want lines and returns them as "attempt/seq stream level line".
func (r *rig) awaitLogLines(id uuid.UUID, want int) []string {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		lines, err := r.st.TaskLogs(context.Background(), store.TaskLogQuery{TaskRunID: id})
		if err != nil {
			r.t.Fatal(err)
		}
		if len(lines) >= want || time.Now().After(deadline) {
			var out []string
			for _, l := range lines {
				out = append(out, fmt.Sprintf("%d/%d %s %s %s", l.Attempt, l.Seq, l.Stream, l.Level, l.Line))
			}
			return out
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not a wait for state
	}
}

// TestTaskLogsOfEveryAttemptAreKeptAcrossARetry: a handler's core.Logger
// lines and a shell command's stdout and stderr land in the task's log
// keyed by attempt; attempt 1 fails, attempt 2 succeeds, and both
// attempts' lines are kept, each in the order logged.
func TestTaskLogsOfEveryAttemptAreKeptAcrossARetry(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("chatty", func(ctx context.Context, task core.Task) (json.RawMessage, error) {
		log := core.Logger(ctx).With("attempt", task.Attempt)
		log.Info("starting", "item", "a b")
		if task.Attempt == 1 {
			log.Error("giving up")
			return nil, errors.New("first attempt fails")
		}
		log.Debug("done")
		return nil, nil
	})
	reg.MustRegister("shell", handlers.Shell)
	r := newRig(t, reg, nil)
	storetest.Apply(t, r.st, `name: logs
tasks:
  - {name: a, handler: chatty, retry: {max_attempts: 2, initial_backoff: 1ms, max_backoff: 1ms}}
  - name: s
    handler: shell
    retry: {max_attempts: 2, initial_backoff: 1ms, max_backoff: 1ms}
    params: {command: [sh, -c, 'echo out $FLOWFORGE_ATTEMPT; echo err >&2; printf "no newline\000"; test $FLOWFORGE_ATTEMPT = 2']}
`)
	run := storetest.Trigger(t, r.st, "logs", "")
	r.start()
	r.publish()
	for range 2 {
		if f := r.awaitFinished(30 * time.Second); f.State != core.TaskRetrying {
			t.Fatalf("attempt 1 of %s: %s, want RETRYING", f.Req.ID, f.State)
		}
	}
	for _, name := range []string{"a", "s"} {
		promoteRetry(t, r.st, run, r.taskOf(run, name).ID)
	}
	r.publish()
	for range 2 {
		if f := r.awaitFinished(30 * time.Second); f.State != core.TaskSucceeded {
			t.Fatalf("attempt 2 of %s: %s %v, want SUCCEEDED", f.Req.ID, f.State, f.Req.Error)
		}
	}
	for _, c := range []struct {
		task string
		want []string
	}{
		{"a", []string{
			"1/1 log INFO starting attempt=1 item=\"a b\"", "1/2 log ERROR giving up attempt=1",
			"2/1 log INFO starting attempt=2 item=\"a b\"", "2/2 log DEBUG done attempt=2"}},
		{"s", []string{
			"1/1 stdout  out 1", "1/2 stderr  err", "1/3 stdout  no newline\uFFFD",
			"2/1 stdout  out 2", "2/2 stderr  err", "2/3 stdout  no newline\uFFFD"}},
	} {
		got, want := r.awaitLogLines(r.taskOf(run, c.task).ID, len(c.want)), c.want
		if c.task == "s" {
			// stdout and stderr are read by two goroutines.
			got, want = sortedPerAttempt(got), sortedPerAttempt(want)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("task %s's log:\n%s\nwant:\n%s", c.task, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// sortedPerAttempt drops the seq of each "attempt/seq ..." line and sorts
// each attempt's lines: the order of lines of two streams is not fixed.
func sortedPerAttempt(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		a, rest, _ := strings.Cut(l, "/")
		_, rest, _ = strings.Cut(rest, " ")
		out[i] = a + " " + rest
	}
	slices.Sort(out)
	return out
}

// TestAnAttemptsLogStopsAtItsCapWithOneMarker: past TaskLogMaxBytes the
// attempt's lines are dropped, counted, and one marker line says how many.
func TestAnAttemptsLogStopsAtItsCapWithOneMarker(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("loud", func(ctx context.Context, _ core.Task) (json.RawMessage, error) {
		for i := range 10 {
			core.Logger(ctx).Info(fmt.Sprintf("line %d 123456789", i)) // 16 bytes each
		}
		return nil, nil
	})
	r := newRig(t, reg, func(c *Config) { c.TaskLogMaxBytes = 40 })
	storetest.Apply(t, r.st, "name: loud\ntasks:\n  - {name: a, handler: loud}\n")
	run := storetest.Trigger(t, r.st, "loud", "")
	r.start()
	r.publish()
	r.awaitFinished(30 * time.Second)
	want := []string{"1/1 log INFO line 0 123456789", "1/2 log INFO line 1 123456789",
		"1/3 log WARN [task log truncated: 8 lines (128 bytes) dropped; 8 past the cap of 40 bytes per attempt (--task-log-max-bytes)]"}
	if got := r.awaitLogLines(r.taskOf(run, "a").ID, 3); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := testutil.ToFloat64(r.metrics.TaskLogLinesDropped.WithLabelValues("cap")); n != 8 {
		t.Fatalf("dropped{cap} = %v, want 8", n)
	}
}

// TestTaskLogsOffLeaveNoLines: TaskLogsOff turns task logs off: core.Logger discards and nothing is stored.
func TestTaskLogsOffLeaveNoLines(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("quiet", func(ctx context.Context, _ core.Task) (json.RawMessage, error) {
		if core.TaskLogOf(ctx) != nil {
			return nil, errors.New("a task log with task logs off")
		}
		core.Logger(ctx).Info("nobody hears this")
		return nil, nil
	})
	r := newRig(t, reg, func(c *Config) { c.TaskLogsOff = true })
	storetest.Apply(t, r.st, "name: quiet\ntasks:\n  - {name: a, handler: quiet}\n")
	storetest.Trigger(t, r.st, "quiet", "")
	r.start()
	r.publish()
	if f := r.awaitFinished(30 * time.Second); f.State != core.TaskSucceeded {
		t.Fatalf("%s %s", f.State, f.Req.Error)
	}
	var n int
	if err := r.db.QueryRow(`SELECT count(*) FROM task_logs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d lines (%v), want none", n, err)
	}
}

// stuckLogs is a TaskLogStore whose inserts hang until released (a
// database that takes the log batch and never answers), counting them.
type stuckLogs struct {
	release chan struct{}
	calls   atomic.Int32
}

func (s *stuckLogs) InsertTaskLogs(ctx context.Context, _ []store.TaskLogLine) (int64, error) {
	s.calls.Add(1)
	select {
	case <-s.release:
		return 0, errors.New("released")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestAStuckTaskLogWriteNeitherFailsNorDelaysTheFinish: with every task
// log insert hanging (released only when the test ends), a logging task's
// attempt is still recorded SUCCEEDED: a finish that waited for its lines
// would never come. The writer has tried to write them.
func TestAStuckTaskLogWriteNeitherFailsNorDelaysTheFinish(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("chatty", func(ctx context.Context, _ core.Task) (json.RawMessage, error) {
		for i := range 5 {
			core.Logger(ctx).Info(fmt.Sprint("line ", i))
		}
		return nil, nil
	})
	logs := &stuckLogs{release: make(chan struct{})}
	r := newRig(t, reg, func(c *Config) { c.TaskLogs = logs })
	storetest.Apply(t, r.st, "name: stuck\ntasks:\n  - {name: a, handler: chatty}\n")
	storetest.Trigger(t, r.st, "stuck", "")
	r.start()
	t.Cleanup(func() { close(logs.release) }) // runs before the rig's stop: its last write fails fast
	r.publish()
	if f := r.awaitFinished(30 * time.Second); f.Err != nil || !f.OK || f.State != core.TaskSucceeded {
		t.Fatalf("finish: %s ok %v err %v, want SUCCEEDED recorded", f.State, f.OK, f.Err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for logs.calls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer never tried to write the lines")
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not a wait for state
	}
}
