package cli_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

const taskLogsWorkflow = `name: logged
tasks:
  - {name: a, handler: noop, retry: {max_attempts: 2, initial_backoff: 1ms, max_backoff: 1ms}}
`

// logAt is the time of every line the tests store.
var logAt = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// addLog stores lines of attempt of task id, seq from first.
func (h *harness) addLog(id uuid.UUID, attempt, first int, stream core.LogStream, level string, texts ...string) {
	h.t.Helper()
	var lines []store.TaskLogLine
	for i, text := range texts {
		lines = append(lines, store.TaskLogLine{TaskRunID: id, Attempt: attempt, Seq: first + i, LoggedAt: logAt,
			Stream: stream, Level: level, Line: text})
	}
	if _, err := h.s.InsertTaskLogs(h.ctx, lines); err != nil {
		h.t.Fatal(err)
	}
}

// logLine is a line as `task logs` prints it.
func logLine(attempt int, stream, text string) string {
	return fmt.Sprintf("%s  #%d %s  %s", logAt.Local().Format("2006-01-02 15:04:05.000"), attempt, stream, text)
}

// retriedTask returns the task of a run of taskLogsWorkflow whose attempt
// 1 failed and whose attempt 2 is RUNNING (claimed, not finished).
func (h *harness) retriedTask() (store.ClaimedTask, uuid.UUID) {
	h.t.Helper()
	h.apply(taskLogsWorkflow)
	id := h.taskID(h.trigger("logged"), "a")
	if st := h.finish(h.claim(id, "w-test"), store.OutcomeFailed, "boom", false); st != core.TaskRetrying {
		h.t.Fatalf("attempt 1 left %s, want RETRYING", st)
	}
	eventually(h.t, 10*time.Second, "the retry is READY", func() bool {
		h.advance()
		return h.state(id) == core.TaskReady
	})
	return h.claim(id, "w-test"), id
}

// TestTaskLogsPrintsEveryAttemptsLinesAndFiltersByAttempt: lines in
// order, attempt by attempt, with their stream and level, terminal-safe;
// --attempt selects one attempt; -o json is the array of lines.
func TestTaskLogsPrintsEveryAttemptsLinesAndFiltersByAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, id := h.retriedTask()
	h.addLog(id, 1, 1, core.LogStreamLog, "ERROR", "first try \x1b[2J")
	h.addLog(id, 2, 1, core.LogStreamStdout, "", "out 1", "out 2")
	h.addLog(id, 2, 3, core.LogStreamStderr, "", "err")

	all := h.must("task", "logs", id.String()[:8]).stdout
	want := strings.Join([]string{
		logLine(1, "log ERROR", `first try \x1b[2J`), logLine(2, "stdout", "out 1"), logLine(2, "stdout", "out 2"), logLine(2, "stderr", "err"),
	}, "\n") + "\n"
	if all != want {
		t.Fatalf("task logs:\n%s\nwant:\n%s", all, want)
	}
	if got, want := h.must("task", "logs", id.String(), "--attempt", "1").stdout, logLine(1, "log ERROR", `first try \x1b[2J`)+"\n"; got != want {
		t.Fatalf("--attempt 1:\n%s\nwant:\n%s", got, want)
	}
	// An attempt the task has not reached is not found (exit 1), in either
	// format; one it ran that logged nothing says so (exit 0).
	for _, args := range [][]string{{"--attempt", "3"}, {"--attempt", "3", "-o", "json"}} {
		r := h.ff(append([]string{"task", "logs", id.String()}, args...)...)
		expect(t, r, 1, "task "+id.String()+" has not run attempt 3: its attempt now is 2")
		if r.stdout != "" {
			t.Fatalf("%v: stdout %q, want none", args, r.stdout)
		}
	}
	quietClaim, quiet := h.retriedTask()
	none := h.must("task", "logs", quiet.String(), "--attempt", "2")
	if wantErr := "ffctl: no log lines for attempt 2 of task " + quiet.String() + " (its handler logged nothing yet, the worker runs with --task-log-max-bytes 0, or retention removed them)\n"; none.stdout != "" || none.stderr != wantErr {
		t.Fatalf("--attempt 2 of a task that logged nothing: %s\nwant no stdout and stderr %q", none, wantErr)
	}
	// Once the task has ended it will log nothing more: no "yet".
	if st := h.finish(quietClaim, store.OutcomeSucceeded, "", false); st != core.TaskSucceeded {
		t.Fatalf("attempt 2 left %s, want SUCCEEDED", st)
	}
	ended := h.must("task", "logs", quiet.String())
	if wantErr := "ffctl: no log lines for task " + quiet.String() + " (its handler logged nothing, the worker runs with --task-log-max-bytes 0, or retention removed them)\n"; ended.stdout != "" || ended.stderr != wantErr {
		t.Fatalf("a SUCCEEDED task that logged nothing: %s\nwant no stdout and stderr %q", ended, wantErr)
	}
	lines := decode[[]store.TaskLogLine](t, h.must("task", "logs", id.String(), "-o", "json").stdout)
	if len(lines) != 4 || lines[0].Level != "ERROR" || lines[3].Stream != core.LogStreamStderr || lines[2].Seq != 2 || lines[2].Attempt != 2 {
		t.Fatalf("-o json: %+v", lines)
	}
	if got := h.must("task", "logs", quiet.String(), "--attempt", "1", "-o", "json").stdout; got != "[]\n" {
		t.Fatalf("-o json of no lines: %q, want []", got)
	}
	// A task that has not run says so, rather than blaming the handler.
	h.apply("name: notyet\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a]}\n")
	pending := h.taskID(h.trigger("notyet"), "b")
	if r := h.must("task", "logs", pending.String()); r.stdout != "" || r.stderr != "ffctl: no log lines for task "+pending.String()+": it has not run (it is PENDING)\n" {
		t.Fatalf("a task that has not run: %s", r)
	}
}

// TestTaskLogsFollowEndsWhenTheTaskEnds: --follow prints lines as they
// come and exits 0 once the task is in a final state.
func TestTaskLogsFollowEndsWhenTheTaskEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c, id := h.retriedTask()
	h.addLog(id, 2, 1, core.LogStreamLog, "INFO", "before")
	done := make(chan result, 1)
	go func() { done <- h.ff("task", "logs", id.String(), "--follow") }()
	h.addLog(id, 2, 2, core.LogStreamLog, "INFO", "while followed")
	select {
	case r := <-done:
		t.Fatalf("--follow ended while the task runs: %s", r)
	case <-time.After(600 * time.Millisecond): // it must still be following: a bound, not a wait for state
	}
	if st := h.finish(c, store.OutcomeSucceeded, "", false); st != core.TaskSucceeded {
		t.Fatalf("attempt 2 left %s", st)
	}
	h.addLog(id, 2, 3, core.LogStreamLog, "INFO", "written beside the finish")
	select {
	case r := <-done:
		want := strings.Join([]string{logLine(2, "log INFO", "before"), logLine(2, "log INFO", "while followed"),
			logLine(2, "log INFO", "written beside the finish")}, "\n") + "\n"
		if r.code != 0 || r.stdout != want {
			t.Fatalf("--follow: %s\nwant stdout:\n%s", r, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("--follow did not end within 20s of the task's end")
	}
}

// TestTaskLogsRefusesBadInput: the id errors are task show's; --attempt
// below 1 is a usage error; nothing is read.
func TestTaskLogsRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	run := h.trigger2()
	unknown := uuid.NewString()
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"malformed", []string{"task", "logs", "xyz"}, 2, `malformed task id "xyz"`},
		{"run id", []string{"task", "logs", run.String()}, 2, run.String() + " is a run id, not a task id (ffctl run show " + run.String() + ")"},
		{"unknown", []string{"task", "logs", unknown}, 1, "task " + unknown + ": not found"},
		{"attempt 0", []string{"task", "logs", unknown, "--attempt", "0"}, 2, "--attempt 0: attempts are counted from 1"},
		{"no id", []string{"task", "logs"}, 2, "task id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			expect(t, h.ff(c.args...), c.code, c.want)
			if show := h.ff(append([]string{"task", "show"}, c.args[2:]...)...); c.name != "attempt 0" && show.stderr != h.ff(c.args...).stderr {
				t.Errorf("task show says %q, task logs %q", show.stderr, h.ff(c.args...).stderr)
			}
		})
	}
}

// trigger2 returns a run of taskLogsWorkflow.
func (h *harness) trigger2() uuid.UUID {
	h.t.Helper()
	h.apply(taskLogsWorkflow)
	return h.trigger("logged")
}
