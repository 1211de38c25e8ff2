package core_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
)

// ev builds a history row; from "" means the task's creation (no from
// state), worker "" no worker, reason "" none.
func ev(at int, from, to core.TaskState, attempt int, token int64, worker, actor, reason string) core.TaskEvent {
	e := core.TaskEvent{At: time.Unix(int64(at), 0), ToState: to, Attempt: attempt, FencingToken: token, Actor: actor}
	if from != "" {
		e.FromState = &from
	}
	if worker != "" {
		e.WorkerID = &worker
	}
	if reason != "" {
		e.Reason = &reason
	}
	return e
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	at := func(s int) *time.Time { u := time.Unix(int64(s), 0); return &u }
	created := ev(0, "", core.TaskPending, 0, 0, "", "trigger", "")
	ready := ev(1, core.TaskPending, core.TaskReady, 0, 0, "", "scheduler", "")
	for _, tc := range []struct {
		name   string
		events []core.TaskEvent
		want   []core.Attempt
	}{
		{"never claimed", []core.TaskEvent{created, ready}, []core.Attempt{}},
		{"no history at all", nil, []core.Attempt{}},
		{"one success: its note is no error", []core.TaskEvent{created, ready,
			ev(2, core.TaskReady, core.TaskRunning, 1, 1, "w1", "w1", ""),
			ev(5, core.TaskRunning, core.TaskSucceeded, 1, 1, "w1", "w1", "result reused"),
		}, []core.Attempt{{Attempt: 1, WorkerID: str("w1"), FencingToken: 1, StartedAt: time.Unix(2, 0), FinishedAt: at(5), Outcome: core.TaskSucceeded}}},
		{"a failure, a reaped lease, then a success", []core.TaskEvent{created, ready,
			ev(2, core.TaskReady, core.TaskRunning, 1, 1, "w1", "w1", ""),
			ev(3, core.TaskRunning, core.TaskRetrying, 1, 1, "w1", "w1", "boom"),
			ev(4, core.TaskRetrying, core.TaskReady, 1, 1, "", "scheduler", ""),
			ev(5, core.TaskReady, core.TaskRunning, 2, 2, "w2", "w2", ""),
			ev(9, core.TaskRunning, core.TaskRetrying, 2, 2, "", "reaper", "lease expired"),
			ev(10, core.TaskRetrying, core.TaskReady, 2, 2, "", "scheduler", ""),
			ev(11, core.TaskReady, core.TaskReady, 2, 2, "w9", "w9", "no handler"), // a hand-back is no attempt
			ev(12, core.TaskReady, core.TaskRunning, 3, 3, "w1", "w1", ""),
			ev(13, core.TaskRunning, core.TaskSucceeded, 3, 3, "w1", "w1", ""),
		}, []core.Attempt{
			{Attempt: 1, WorkerID: str("w1"), FencingToken: 1, StartedAt: time.Unix(2, 0), FinishedAt: at(3), Outcome: core.TaskRetrying, Error: str("boom")},
			{Attempt: 2, WorkerID: str("w2"), FencingToken: 2, StartedAt: time.Unix(5, 0), FinishedAt: at(9), Outcome: core.TaskRetrying, Error: str("lease expired")},
			{Attempt: 3, WorkerID: str("w1"), FencingToken: 3, StartedAt: time.Unix(12, 0), FinishedAt: at(13), Outcome: core.TaskSucceeded},
		}},
		{"in progress; the claim's actor stands in for a missing worker", []core.TaskEvent{created, ready,
			ev(2, core.TaskReady, core.TaskRunning, 1, 1, "", "old-worker", ""),
		}, []core.Attempt{{Attempt: 1, WorkerID: str("old-worker"), FencingToken: 1, StartedAt: time.Unix(2, 0), Outcome: core.TaskRunning}}},
		{"dead, then requeued and cancelled", []core.TaskEvent{created, ready,
			ev(2, core.TaskReady, core.TaskRunning, 1, 1, "w1", "w1", ""),
			ev(3, core.TaskRunning, core.TaskDead, 1, 1, "w1", "w1", "permanent"),
			ev(4, core.TaskDead, core.TaskPending, 0, 1, "", "alice", "fixed"),
			ev(5, core.TaskPending, core.TaskReady, 0, 1, "", "scheduler", ""),
			ev(6, core.TaskReady, core.TaskRunning, 1, 2, "w1", "w1", ""),
			ev(7, core.TaskRunning, core.TaskCancelled, 1, 2, "w1", "w1", ""),
		}, []core.Attempt{
			{Attempt: 1, WorkerID: str("w1"), FencingToken: 1, StartedAt: time.Unix(2, 0), FinishedAt: at(3), Outcome: core.TaskDead, Error: str("permanent")},
			{Attempt: 1, WorkerID: str("w1"), FencingToken: 2, StartedAt: time.Unix(6, 0), FinishedAt: at(7), Outcome: core.TaskCancelled},
		}},
		{"a transition out of RUNNING without its claim is ignored", []core.TaskEvent{
			ev(3, core.TaskRunning, core.TaskRetrying, 1, 1, "w1", "w1", "boom"),
		}, []core.Attempt{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := core.Attempts(tc.events)
			if got == nil {
				t.Fatal("Attempts returned nil; JSON output wants []")
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("attempts\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// TestAttemptOutcomesAreTheEdgesOutOfRunning: the list the worker's metric
// is exported with is the state machine's, and each is an attempt's end.
func TestAttemptOutcomesAreTheEdgesOutOfRunning(t *testing.T) {
	t.Parallel()
	want := []core.TaskState{core.TaskSucceeded, core.TaskRetrying, core.TaskDead, core.TaskCancelled, core.TaskSkipped}
	got := core.AttemptOutcomes()
	if !slices.Equal(got, want) {
		t.Fatalf("AttemptOutcomes() = %v, want %v", got, want)
	}
	for _, s := range core.TaskStates {
		if err := core.CheckTransition(core.TaskRunning, s); (err == nil) != slices.Contains(got, s) {
			t.Errorf("RUNNING -> %s: transition error %v, but in AttemptOutcomes: %v", s, err, slices.Contains(got, s))
		}
	}
	got[0] = core.TaskDead
	if core.AttemptOutcomes()[0] != core.TaskSucceeded {
		t.Fatal("AttemptOutcomes shares its slice with the state machine")
	}
}
