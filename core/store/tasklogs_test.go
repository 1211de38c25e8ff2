package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// logLines returns n lines of attempt of task run id, seq from first.
func logLines(id uuid.UUID, attempt, first, n int, stream core.LogStream) []store.TaskLogLine {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var out []store.TaskLogLine
	for i := range n {
		seq := first + i
		out = append(out, store.TaskLogLine{TaskRunID: id, Attempt: attempt, Seq: seq, LoggedAt: at.Add(time.Duration(seq) * time.Millisecond),
			Stream: stream, Line: strings.Repeat("x", seq)})
	}
	return out
}

// TestInsertTaskLogsIsIdempotentAndReadInOrder: a batch written twice
// stores each line once; lines come back by attempt then seq whatever
// the order written; a page after a cursor and one attempt's filter
// select what they say; the tail is the newest lines, oldest first.
func TestInsertTaskLogsIsIdempotentAndReadInOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.succeededTask()
	batch := append(logLines(id, 2, 1, 2, core.LogStreamStdout), logLines(id, 1, 1, 3, core.LogStreamLog)...)
	batch[2].Level = "INFO"
	for i, want := range []int64{5, 0} {
		n, err := f.s.InsertTaskLogs(f.ctx, batch)
		if err != nil || n != want {
			t.Fatalf("insert %d: %d, %v; want %d", i, n, err, want)
		}
	}
	all, err := f.s.TaskLogs(f.ctx, store.TaskLogQuery{TaskRunID: id})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range all {
		got = append(got, fmtLine(l))
	}
	want := []string{"1/1 log INFO x", "1/2 log  xx", "1/3 log  xxx", "2/1 stdout  x", "2/2 stdout  xx"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lines %q, want %q", got, want)
	}
	for _, c := range []struct {
		q    store.TaskLogQuery
		want []string
	}{
		{store.TaskLogQuery{TaskRunID: id, Attempt: 2}, want[3:]},
		{store.TaskLogQuery{TaskRunID: id, AfterAttempt: 1, AfterSeq: 2}, want[2:]},
		{store.TaskLogQuery{TaskRunID: id, Limit: 2}, want[:2]},
		{store.TaskLogQuery{TaskRunID: id, Attempt: 3}, nil},
	} {
		page, err := f.s.TaskLogs(f.ctx, c.q)
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, l := range page {
			got = append(got, fmtLine(l))
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%+v: %q, want %q", c.q, got, c.want)
		}
	}
	tail, err := f.s.TaskLogTail(f.ctx, id, 2)
	if err != nil || len(tail) != 2 || fmtLine(tail[0]) != want[3] || fmtLine(tail[1]) != want[4] {
		t.Fatalf("tail %v, %v; want %q", tail, err, want[3:])
	}
}

func fmtLine(l store.TaskLogLine) string {
	return strings.Join([]string{
		strings.Join([]string{strconv.Itoa(l.Attempt), strconv.Itoa(l.Seq)}, "/"), string(l.Stream), l.Level, l.Line}, " ")
}

// TestInsertTaskLogsSanitisesAndRefuses: NUL and invalid UTF-8 are
// replaced (PostgreSQL's text refuses NUL), a line over
// core.MaxTaskLogLineBytes is cut; a line of an unknown stream or
// attempt 0 refuses the batch with nothing written; a line of a task run
// that does not exist is skipped.
func TestInsertTaskLogsSanitisesAndRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.succeededTask()
	lines := logLines(id, 1, 1, 3, core.LogStreamStderr)
	lines[0].Line = "a\x00b\xffc"
	lines[1].Line = strings.Repeat("y", core.MaxTaskLogLineBytes+10)
	lines[2].Line = core.SanitizeLogLine(strings.Repeat("z", 20000)) // as the worker hands it over
	if n, err := f.s.InsertTaskLogs(f.ctx, append(lines, logLines(uuid.New(), 1, 1, 1, core.LogStreamLog)...)); err != nil || n != 3 {
		t.Fatalf("insert: %d, %v; want 3", n, err)
	}
	got, err := f.s.TaskLogs(f.ctx, store.TaskLogQuery{TaskRunID: id})
	if err != nil || len(got) != 3 {
		t.Fatalf("read: %v, %v", got, err)
	}
	if got[0].Line != "a\uFFFDb\uFFFDc" {
		t.Errorf("line %q, want a\uFFFDb\uFFFDc", got[0].Line)
	}
	// A long line is cut to MaxTaskLogLineBytes in all, its note counting
	// the bytes of the line as written; the worker's cut line is stored
	// as it came (the store's second pass once cut the note and counted
	// the note's 27 bytes).
	for i, c := range map[int]string{1: "y", 2: "z"} {
		line, total := got[i].Line, len(lines[i].Line)
		if i == 2 {
			total = 20000
		}
		kept := strings.Index(line, "…")
		if want := strings.Repeat(c, kept) + fmt.Sprintf("… [%d bytes truncated]", total-kept); line != want || len(line) > core.MaxTaskLogLineBytes || kept < core.MaxTaskLogLineBytes-64 {
			t.Errorf("line %d of %d bytes: stored %d bytes ending %q, want at most %d ending with the note of %d bytes cut", i, total, len(line), line[len(line)-30:], core.MaxTaskLogLineBytes, total-kept)
		}
	}
	for _, bad := range []store.TaskLogLine{
		{TaskRunID: id, Attempt: 1, Seq: 9, Stream: "syslog", Line: "x"},
		{TaskRunID: id, Attempt: 0, Seq: 9, Stream: core.LogStreamLog, Line: "x"},
		{TaskRunID: id, Attempt: 1, Seq: 0, Stream: core.LogStreamLog, Line: "x"},
	} {
		_, err := f.s.InsertTaskLogs(f.ctx, append(logLines(id, 3, 1, 1, core.LogStreamLog), bad))
		if !errors.Is(err, store.ErrBadTaskLog) {
			t.Errorf("%+v: %v, want ErrBadTaskLog", bad, err)
		}
	}
	if n := f.count(`SELECT count(*) FROM task_logs WHERE attempt = 3`); n != 0 {
		t.Errorf("a refused batch wrote %d lines", n)
	}
}

// TestPrunedAndDeletedRunsLeaveNoLogLines: the pruner and `run delete`
// take a run's log lines with it, and leave other runs' lines alone; a
// dry run deletes none.
func TestPrunedAndDeletedRunsLeaveNoLogLines(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pruned, deleted, kept := f.succeededRun(), f.succeededRun(), f.succeededRun()
	for _, run := range []uuid.UUID{pruned, deleted, kept} {
		if _, err := f.s.InsertTaskLogs(f.ctx, logLines(f.taskID(run, "a"), 1, 1, 3, core.LogStreamLog)); err != nil {
			t.Fatal(err)
		}
	}
	linesOf := func(run uuid.UUID) int {
		return f.count(`SELECT count(*) FROM task_logs WHERE task_run_id IN (SELECT id FROM task_runs WHERE run_id = $1)`, run)
	}
	if _, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{deleted}, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if n := linesOf(deleted); n != 3 {
		t.Fatalf("a dry run left %d lines, want 3", n)
	}
	if _, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{deleted}, Actor: "alice", Reason: "cleanup"}); err != nil {
		t.Fatal(err)
	}
	f.backdate(pruned, 8*day)
	if c, err := f.s.PruneRuns(f.ctx, store.PruneRequest{State: core.RunSucceeded, Age: 7 * day}); err != nil || c.Runs != 1 {
		t.Fatalf("prune: %+v, %v", c, err)
	}
	if n := f.count(`SELECT count(*) FROM task_logs`); n != 3 || linesOf(kept) != 3 {
		t.Fatalf("%d lines left, want the kept run's 3", n)
	}
}

// succeededTask returns the task run of a settled SUCCEEDED run.
func (f *fixture) succeededTask() uuid.UUID {
	f.t.Helper()
	return f.taskID(f.succeededRun(), "a")
}

// TestARequeuedTasksNewAttemptsKeepTheirLogLines (mode 149): a requeue
// sends a DEAD task back to attempt 0, and its next attempt 1 numbers its
// lines from 1 again. The lines of the earlier rounds move below seq 1 in
// the requeue's statement, so the new round's lines are stored beside
// them (before, they collided with the earlier attempt 1's on the primary
// key and were skipped: InsertTaskLogs returned 0, nothing said so). The
// log reads round by round, each round's attempts in order, and a
// follower whose cursor is at an earlier round's last line (attempt 2)
// gets the new round's attempt 1 next (ordered by attempt alone, it was
// behind the cursor: a trial's follower skipped it).
func TestARequeuedTasksNewAttemptsKeepTheirLogLines(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, b := f.deadRun()
	read := func(q store.TaskLogQuery) []store.TaskLogLine {
		t.Helper()
		q.TaskRunID = b
		got, err := f.s.TaskLogs(f.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	texts := func(lines []store.TaskLogLine) []string {
		var out []string
		for _, l := range lines {
			out = append(out, l.Line)
		}
		return out
	}
	write := func(round string, attempt, n int) {
		t.Helper()
		lines := logLines(b, attempt, 1, n, core.LogStreamLog)
		for i := range lines {
			lines[i].Line = fmt.Sprintf("%s#%d.%d", round, attempt, i+1)
		}
		if got, err := f.s.InsertTaskLogs(f.ctx, lines); err != nil || got != int64(n) {
			t.Fatalf("round %s attempt %d: inserted %d lines (%v), want %d", round, attempt, got, err, n)
		}
	}
	requeue := func() {
		t.Helper()
		if err := f.s.Requeue(f.ctx, b, "test", "again"); err != nil {
			t.Fatal(err)
		}
		// Back to DEAD for the next round (the log is what is checked).
		if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET state = 'DEAD', attempt = 2 WHERE id = $1`, b); err != nil {
			t.Fatal(err)
		}
	}
	write("a", 1, 2)
	write("a", 2, 1)
	requeue()
	cursor := read(store.TaskLogQuery{})
	last := cursor[len(cursor)-1]
	write("b", 1, 1)
	if got, want := texts(read(store.TaskLogQuery{AfterAttempt: last.Attempt, AfterSeq: last.Seq})), []string{"b#1.1"}; !slices.Equal(got, want) {
		t.Fatalf("after the earlier round's last line (%s, attempt %d, seq %d): %v, want %v", last.Line, last.Attempt, last.Seq, got, want)
	}
	write("b", 2, 1)
	lowest := f.count(`SELECT min(seq) FROM task_logs WHERE task_run_id = $1`, b)
	requeue()
	// Every line moved lands below the lowest seq before the move: no
	// moved line can meet one not yet moved on the primary key, in
	// whatever order the UPDATE visits them.
	if top := f.count(`SELECT max(seq) FROM task_logs WHERE task_run_id = $1`, b); top >= lowest {
		t.Fatalf("after the second requeue the highest seq is %d, want below %d (the lowest before it)", top, lowest)
	}
	write("c", 1, 1)
	all := read(store.TaskLogQuery{})
	if got, want := texts(all), []string{"a#1.1", "a#1.2", "a#2.1", "b#1.1", "b#2.1", "c#1.1"}; !slices.Equal(got, want) {
		t.Fatalf("after two requeues, the log %v, want %v", got, want)
	}
	if got, want := texts(read(store.TaskLogQuery{Attempt: 1})), []string{"a#1.1", "a#1.2", "b#1.1", "c#1.1"}; !slices.Equal(got, want) {
		t.Fatalf("attempt 1's lines %v, want %v", got, want)
	}
	for i := 0; i+1 < len(all); i++ { // a page from any line goes on from the next
		if next := read(store.TaskLogQuery{AfterAttempt: all[i].Attempt, AfterSeq: all[i].Seq, Limit: 1}); len(next) != 1 || next[0].Line != all[i+1].Line {
			t.Fatalf("the page after %s (attempt %d, seq %d): %v, want %s", all[i].Line, all[i].Attempt, all[i].Seq, texts(next), all[i+1].Line)
		}
	}
	tail, err := f.s.TaskLogTail(f.ctx, b, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := texts(tail), []string{"b#2.1", "c#1.1"}; !slices.Equal(got, want) {
		t.Fatalf("the log's tail %v, want %v", got, want)
	}
}
