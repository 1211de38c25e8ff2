package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestFinishRecordedReadsTheAttemptsOwnHistory: mode 85. The read-back of
// a finish answers from the attempt's own history row, whatever the task
// row did since: a finish is found after the scheduler promoted its retry
// (token + 1) or after the task succeeded; an attempt still running, one
// the reaper took (its row is at the bumped token, for the same worker), a
// newer attempt of the same worker whose predecessor finished, another
// worker at the attempt's token and an unknown task are not.
func TestFinishRecordedReadsTheAttemptsOwnHistory(t *testing.T) {
	t.Parallel()
	const wf = "name: rb\ntasks:\n  - {name: a, handler: noop, retry: {max_attempts: 3, initial_backoff: 1ms, max_backoff: 1ms}}\n"
	failed := store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Millisecond}
	for _, tc := range []struct {
		name string
		// attempt runs the scenario on task id and returns the attempt to
		// read back (its token and worker).
		attempt func(f *fixture, id uuid.UUID) (int64, string)
		want    core.TaskState // "": not recorded
	}{
		{name: "failed, and its retry promoted", want: core.TaskRetrying, attempt: func(f *fixture, id uuid.UUID) (int64, string) {
			c := f.claim(id, "w1", time.Minute)
			f.finish(c, failed)
			f.waitRetryDue(id)
			f.advance()
			if st, tok := f.state(id); st != core.TaskReady || tok != c.FencingToken+1 {
				f.t.Fatalf("after the pass: %s token %d, want READY at %d", st, tok, c.FencingToken+1)
			}
			return c.FencingToken, "w1"
		}},
		{name: "succeeded", want: core.TaskSucceeded, attempt: func(f *fixture, id uuid.UUID) (int64, string) {
			c := f.claim(id, "w1", time.Minute)
			f.succeed(c)
			return c.FencingToken, "w1"
		}},
		{name: "still running", attempt: func(f *fixture, id uuid.UUID) (int64, string) {
			c := f.claim(id, "w1", time.Minute)
			return c.FencingToken, "w1"
		}},
		{name: "reaped", attempt: func(f *fixture, id uuid.UUID) (int64, string) {
			c := f.claim(id, "w1", 50*time.Millisecond)
			f.waitLeaseExpired(id)
			if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "test-reaper"); err != nil || n != 1 {
				f.t.Fatalf("reap: %d %v", n, err)
			}
			return c.FencingToken, "w1"
		}},
		{name: "a newer attempt of the same worker", attempt: func(f *fixture, id uuid.UUID) (int64, string) {
			f.finish(f.claim(id, "w1", time.Minute), failed)
			f.waitRetryDue(id)
			f.advance()
			c := f.claim(id, "w1", time.Minute)
			return c.FencingToken, "w1"
		}},
		{name: "another worker at the attempt's token", attempt: func(f *fixture, id uuid.UUID) (int64, string) {
			c := f.claim(id, "w1", time.Minute)
			f.succeed(c)
			return c.FencingToken, "w2"
		}},
		{name: "an unknown task", attempt: func(*fixture, uuid.UUID) (int64, string) { return 1, "w1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(wf)
			id := f.taskID(f.trigger("rb", ""), "a")
			tok, worker := tc.attempt(f, id)
			if tc.name == "an unknown task" {
				id = uuid.New()
			}
			st, ok, err := f.s.FinishRecorded(f.ctx, id, tok, worker)
			if err != nil || ok != (tc.want != "") || st != tc.want {
				t.Fatalf("FinishRecorded(token %d, %s) = %q, %v, %v; want %q, %v", tok, worker, st, ok, err, tc.want, tc.want != "")
			}
		})
	}
}

// TestFinishRecordedIsIndexBacked seeds 20000 tasks with their history and
// EXPLAINs the read-back: an (bitmap) index scan of task_events_task whose index
// condition is the task, never a sequential scan of the history.
func TestFinishRecordedIsIndexBacked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, q := range []string{
		`INSERT INTO workflows (name, version, definition) VALUES ('w', 1, '{}')`,
		`INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state)
SELECT md5('run' || g)::uuid, (SELECT id FROM workflows LIMIT 1), 'w', 1, 'SUCCEEDED' FROM generate_series(1, 20000) g`,
		`INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts, fencing_token)
SELECT md5('task' || g)::uuid, md5('run' || g)::uuid, 't', 'noop', 'SUCCEEDED', 3, 2 FROM generate_series(1, 20000) g`,
		`INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor)
SELECT md5('task' || g)::uuid, md5('run' || g)::uuid, s.f, s.t, 1, 2, 'w1', 'w1'
  FROM generate_series(1, 20000) g, (VALUES ('READY', 'RUNNING'), ('RUNNING', 'SUCCEEDED')) s(f, t)`,
		`ANALYZE workflows, workflow_runs, task_runs, task_events`,
	} {
		if _, err := f.db.ExecContext(f.ctx, q); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	q := strings.NewReplacer("$1", "md5('task7')::uuid", "$2", "2", "$3", "'w1'").Replace(store.QFinishRecorded)
	text := explainText(t, f.ctx, f.db, "the query", q)
	indexed := strings.Contains(text, "Index Scan using task_events_task on task_events") ||
		strings.Contains(text, "Bitmap Index Scan on task_events_task")
	if strings.Contains(text, "Seq Scan") || !indexed || !strings.Contains(text, "Index Cond: (task_run_id = ") {
		t.Errorf("the read-back is not an index scan of task_events_task by task:\n%s", text)
	}
}
