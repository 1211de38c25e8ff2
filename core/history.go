package core

import (
	"slices"
	"time"
)

// TaskEvent is one row of a task's history (task_events): one transition,
// who made it and why. The db tags name the columns the store reads it
// from; the JSON field names are a stable interface (`ffctl task show -o
// json` "events").
type TaskEvent struct {
	ID        int64      `db:"id" json:"id"`
	At        time.Time  `db:"at" json:"at"`
	FromState *TaskState `db:"from_state" json:"from_state"`
	// ToState is the state the transition entered.
	ToState TaskState `db:"to_state" json:"to_state"`
	Attempt int       `db:"attempt" json:"attempt"`
	// FencingToken is the task's token after the transition.
	FencingToken int64   `db:"fencing_token" json:"fencing_token"`
	WorkerID     *string `db:"worker_id" json:"worker_id"`
	Actor        string  `db:"actor" json:"actor"`
	Reason       *string `db:"reason" json:"reason"`
}

// Attempt is one execution of a task, rebuilt from its history: it starts
// with a claim (READY -> RUNNING) and ends with the next transition out of
// RUNNING (a finish, a cancellation, or the reaper taking an expired lease).
type Attempt struct {
	Attempt int `json:"attempt"`
	// WorkerID is the worker that claimed the attempt (the claim's actor
	// when the event names no worker).
	WorkerID *string `json:"worker_id"`
	// FencingToken is the token the claim issued; every write of the
	// attempt had to carry it.
	FencingToken int64      `json:"fencing_token"`
	StartedAt    time.Time  `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at"`
	// Outcome is the state the attempt left the task in: SUCCEEDED,
	// RETRYING, DEAD, CANCELLED or SKIPPED (a wait's timeout); RUNNING
	// while it is in progress.
	Outcome TaskState `json:"outcome"`
	// Error is why a failed attempt failed (the handler's error, or the
	// reaper's "lease expired" note); null on success.
	Error *string `json:"error"`
}

// AttemptOutcomes returns the states an attempt can end in, in the order of
// the state machine's edges out of RUNNING (which it is read from):
// SUCCEEDED, RETRYING, DEAD, CANCELLED, SKIPPED (a wait whose timeout
// passed with on_timeout: skip; a worker's attempt never ends so). The
// slice is the caller's.
func AttemptOutcomes() []TaskState {
	return slices.Clone(legalTransitions[TaskRunning])
}

// Attempts rebuilds a task's attempts from its history, oldest first (an
// empty, non-nil slice for a task never claimed). events must be in the
// order they were written (ascending ID). A transition out of RUNNING with
// no open attempt (a history cut short) is ignored.
func Attempts(events []TaskEvent) []Attempt {
	out := []Attempt{}
	open := -1
	for _, e := range events {
		var from TaskState
		if e.FromState != nil {
			from = *e.FromState
		}
		switch {
		case e.ToState == TaskRunning:
			worker := e.WorkerID
			if worker == nil {
				a := e.Actor
				worker = &a
			}
			out = append(out, Attempt{Attempt: e.Attempt, WorkerID: worker, FencingToken: e.FencingToken, StartedAt: e.At, Outcome: TaskRunning})
			open = len(out) - 1
		case from == TaskRunning && open >= 0:
			at := e.At
			a := &out[open]
			a.FinishedAt = &at
			a.Outcome = e.ToState
			if e.ToState != TaskSucceeded && e.Reason != nil && *e.Reason != "" {
				reason := *e.Reason
				a.Error = &reason
			}
			open = -1
		}
	}
	return out
}
