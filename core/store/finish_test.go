package store_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

func TestFinishOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		attempts  int // max_attempts
		prior     int // failed attempts before the one finished here
		req       store.FinishRequest
		want      core.TaskState
		retryAt   bool // next_attempt_at set
		finished  bool // finished_at set
		result    string
		errorText string
	}{
		{name: "success stores the result", attempts: 3, req: store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"rows": 42}`)},
			want: core.TaskSucceeded, finished: true, result: `{"rows": 42}`},
		{name: "success without a result stores null", attempts: 3, req: store.FinishRequest{Outcome: store.OutcomeSucceeded},
			want: core.TaskSucceeded, finished: true, result: `null`},
		{name: "failure with attempts left retries", attempts: 3, req: store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: 5 * time.Second},
			want: core.TaskRetrying, retryAt: true, errorText: "boom"},
		{name: "permanent failure is dead at once", attempts: 3, req: store.FinishRequest{Outcome: store.OutcomeFailed, Error: "bad input", Permanent: true, RetryDelay: 5 * time.Second},
			want: core.TaskDead, finished: true, errorText: "bad input"},
		{name: "failure of the last attempt is dead", attempts: 2, prior: 1, req: store.FinishRequest{Outcome: store.OutcomeFailed, Error: "again", RetryDelay: 5 * time.Second},
			want: core.TaskDead, finished: true, errorText: "again"},
		{name: "failure of a single attempt is dead", attempts: 1, req: store.FinishRequest{Outcome: store.OutcomeFailed, Error: "once"},
			want: core.TaskDead, finished: true, errorText: "once"},
		{name: "cancelled", attempts: 3, req: store.FinishRequest{Outcome: store.OutcomeCancelled, Error: "run cancelled", Result: json.RawMessage(`{"x":1}`)},
			want: core.TaskCancelled, finished: true, errorText: "run cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.apply("name: fin\ntasks:\n  - {name: a, handler: noop, retry: {max_attempts: " + strconv.Itoa(tc.attempts) + ", initial_backoff: 1ms, max_backoff: 1ms}}\n")
			id := f.taskID(f.trigger("fin", ""), "a")
			for range tc.prior {
				c := f.claim(id, "w1", time.Minute)
				if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "earlier", RetryDelay: time.Millisecond}); st != core.TaskRetrying {
					t.Fatalf("earlier attempt: %s", st)
				}
				f.waitRetryDue(id)
				f.advance()
			}
			c := f.claim(id, "w1", time.Minute)
			if st := f.finish(c, tc.req); st != tc.want {
				t.Fatalf("Finish returned %s, want %s", st, tc.want)
			}
			d := f.task(id)
			if d.State != tc.want || d.LeaseExpiresAt != nil || d.FencingToken != c.FencingToken {
				t.Fatalf("task: state %s lease %v token %d", d.State, d.LeaseExpiresAt, d.FencingToken)
			}
			if (d.NextAttemptAt != nil) != tc.retryAt || (d.FinishedAt != nil) != tc.finished {
				t.Fatalf("next_attempt_at %v finished_at %v", d.NextAttemptAt, d.FinishedAt)
			}
			if string(d.Result) != tc.result {
				t.Fatalf("result %q, want %q", d.Result, tc.result)
			}
			if tc.errorText == "" && d.Error != nil || tc.errorText != "" && (d.Error == nil || *d.Error != tc.errorText) {
				t.Fatalf("error %v, want %q", d.Error, tc.errorText)
			}
			if tc.retryAt {
				// Due RetryDelay after the finish, on the database clock.
				if !f.dbBool(`SELECT next_attempt_at BETWEEN now() + interval '3 seconds' AND now() + interval '5 seconds' FROM task_runs WHERE id = $1`, id) {
					t.Fatalf("next_attempt_at %v is not about 5s from the database's now()", d.NextAttemptAt)
				}
			}
			last := d.Events[len(d.Events)-1]
			if last.FromState == nil || *last.FromState != "RUNNING" || last.ToState != tc.want || last.Actor != "w1" {
				t.Fatalf("last event %+v", last)
			}
		})
	}
}

func TestFinishRefusesAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", time.Minute)
	if _, ok, err := f.s.Finish(f.ctx, store.FinishRequest{ID: id, Token: c.FencingToken, Outcome: "DONE"}); ok || err == nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	f.wantState(id, core.TaskRunning)
}
