package store

import (
	"time"
)

// Attempt is one execution of a task, rebuilt from its history: it starts
// with a claim (READY -> RUNNING) and ends with the next transition out of
// RUNNING (a finish, a cancellation, or the reaper taking an expired lease).
type Attempt struct {
	Attempt int `json:"attempt"`
	// WorkerID is the worker that claimed the attempt.
	WorkerID *string `json:"worker_id"`
	// FencingToken is the token the claim issued; every write of the
	// attempt had to carry it.
	FencingToken int64      `json:"fencing_token"`
	StartedAt    time.Time  `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at"`
	// Outcome is the state the attempt left the task in: SUCCEEDED,
	// RETRYING, DEAD or CANCELLED; RUNNING while it is in progress.
	Outcome string `json:"outcome"`
	// Error is why a failed attempt failed (the handler's error, or the
	// reaper's "lease expired" note); null on success.
	Error *string `json:"error"`
}

// Attempts rebuilds a task's attempts from its history, oldest first.
// events must be in the order GetTask returns them.
func Attempts(events []TaskEvent) []Attempt {
	out := []Attempt{}
	open := -1
	for _, e := range events {
		from := ""
		if e.FromState != nil {
			from = *e.FromState
		}
		switch {
		case e.ToState == "RUNNING":
			worker := e.WorkerID
			if worker == nil {
				a := e.Actor
				worker = &a
			}
			out = append(out, Attempt{Attempt: e.Attempt, WorkerID: worker, FencingToken: e.FencingToken, StartedAt: e.At, Outcome: "RUNNING"})
			open = len(out) - 1
		case from == "RUNNING" && open >= 0:
			at := e.At
			a := &out[open]
			a.FinishedAt = &at
			a.Outcome = e.ToState
			if e.ToState != "SUCCEEDED" && e.Reason != nil && *e.Reason != "" {
				reason := *e.Reason
				a.Error = &reason
			}
			open = -1
		}
	}
	return out
}
