package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// TaskState is the state of one task run. The values are stored verbatim in
// task_runs.state.
type TaskState string

// Task states. PENDING waits for its dependencies; READY has an outbox row and
// waits for a worker; RUNNING holds a lease; RETRYING waits for its backoff to
// elapse; SUCCEEDED, DEAD, CANCELLED and UPSTREAM_FAILED are terminal (DEAD
// can be requeued by an operator, and a requeue in a fail_fast run also
// returns the tasks fail_fast CANCELLED to PENDING). UPSTREAM_FAILED is a
// PENDING task with a DEAD task among its transitive dependencies: it is set
// in the statement that writes the DEAD state and returns to PENDING when a
// requeue leaves none of its ancestors DEAD. SKIPPED is a task the
// scheduler decided not to run (its `when` was false, or its trigger_rule
// skips it: an all_success task below a SKIPPED one, an on_failure task of
// a run that did not fail); it is terminal and final, and a run whose tasks
// all ended SUCCEEDED or SKIPPED is SUCCEEDED.
const (
	TaskPending        TaskState = "PENDING"
	TaskReady          TaskState = "READY"
	TaskRunning        TaskState = "RUNNING"
	TaskSucceeded      TaskState = "SUCCEEDED"
	TaskRetrying       TaskState = "RETRYING"
	TaskDead           TaskState = "DEAD"
	TaskCancelled      TaskState = "CANCELLED"
	TaskUpstreamFailed TaskState = "UPSTREAM_FAILED"
	TaskSkipped        TaskState = "SKIPPED"
)

// TaskStates lists every task state in lifecycle order.
var TaskStates = []TaskState{TaskPending, TaskReady, TaskRunning, TaskSucceeded, TaskRetrying, TaskDead, TaskCancelled, TaskUpstreamFailed, TaskSkipped}

// Valid reports whether s is one of the task states.
func (s TaskState) Valid() bool {
	_, ok := legalTransitions[s]
	return ok
}

// Terminal reports whether no automatic transition leaves s. DEAD is terminal
// even though an operator may requeue it, and UPSTREAM_FAILED even though a
// requeue of its DEAD ancestor returns it to PENDING.
func (s TaskState) Terminal() bool {
	return s == TaskSucceeded || s == TaskDead || s == TaskCancelled || s == TaskUpstreamFailed || s == TaskSkipped
}

// Active reports whether a task in state s is queued, running or waiting to
// retry: a run with an active task is not settled.
func (s TaskState) Active() bool {
	return s == TaskReady || s == TaskRunning || s == TaskRetrying
}

// legalTransitions is the state machine of DESIGN.md, as data. Every store
// method that changes a task's state checks its edge here before any SQL
// runs. The scheduler's decision over a PENDING task (its when, trigger
// rule, on_failure or for_each) takes it to READY, SKIPPED, UPSTREAM_FAILED
// (its rule refuses a failed upstream), DEAD (an expression failed, or a
// for_each gave more than max_items), RUNNING (a for_each expanded: it runs
// through its elements, with no worker of its own; a sleep, a wait or a
// child run starts to hold) or SUCCEEDED (a for_each over an empty list).
// A held wait whose timeout passes goes RUNNING -> SKIPPED (on_timeout:
// skip) or RETRYING, and RETRYING -> RUNNING when it waits again. A DEAD
// for_each task goes back to RUNNING with the requeue of one of its DEAD
// elements (DEAD -> RUNNING), and its join ends it again.
var legalTransitions = map[TaskState][]TaskState{
	TaskPending:        {TaskReady, TaskCancelled, TaskUpstreamFailed, TaskSkipped, TaskRunning, TaskDead, TaskSucceeded},
	TaskReady:          {TaskRunning, TaskDead, TaskCancelled},
	TaskRunning:        {TaskSucceeded, TaskRetrying, TaskDead, TaskCancelled, TaskSkipped},
	TaskRetrying:       {TaskReady, TaskCancelled, TaskRunning},
	TaskDead:           {TaskPending, TaskRunning},
	TaskSucceeded:      nil,
	TaskCancelled:      {TaskPending},
	TaskUpstreamFailed: {TaskPending},
	TaskSkipped:        nil,
}

// ErrIllegalTransition is returned (wrapped in a *TransitionError) when code
// asks for an edge the state machine does not have. It is a programming
// error, never contention: losing a race is reported as false, not an error.
var ErrIllegalTransition = errors.New("illegal task transition")

// TransitionError names the refused edge.
type TransitionError struct {
	From, To TaskState
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("%s: %s -> %s", ErrIllegalTransition, e.From, e.To)
}

// Unwrap returns ErrIllegalTransition.
func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }

// CheckTransition returns nil when from -> to is an edge of the task state
// machine, and a *TransitionError (matching ErrIllegalTransition) otherwise,
// including for unknown states and self-loops.
func CheckTransition(from, to TaskState) error {
	for _, s := range legalTransitions[from] {
		if s == to {
			return nil
		}
	}
	return &TransitionError{From: from, To: to}
}

// RunState is the derived state of a workflow run, stored in
// workflow_runs.state.
type RunState string

// Run states. See DeriveRunState for how they are computed.
const (
	RunPending   RunState = "PENDING"
	RunRunning   RunState = "RUNNING"
	RunSucceeded RunState = "SUCCEEDED"
	RunFailed    RunState = "FAILED"
	RunCancelled RunState = "CANCELLED"
)

// RunStates lists every run state.
var RunStates = []RunState{RunPending, RunRunning, RunSucceeded, RunFailed, RunCancelled}

// finalRunStates are the run states whose outcome is decided, in RunStates'
// order: FinalRunStates returns them, Terminal reads them.
var finalRunStates = []RunState{RunSucceeded, RunFailed, RunCancelled}

// FinalRunStates returns the run states whose outcome is decided
// (Terminal): SUCCEEDED, FAILED, CANCELLED, in RunStates' order. It is the
// one list the CLI's usage texts, the store's SQL (store.finalRunStatesSQL)
// and the pruner's metric labels are built from or checked against. The
// slice is the caller's.
func FinalRunStates() []RunState {
	return slices.Clone(finalRunStates)
}

// Terminal reports whether the run's outcome is decided (one of
// FinalRunStates). A FAILED run may still have running tasks, and a
// requeue of its DEAD task reopens it.
func (s RunState) Terminal() bool {
	return slices.Contains(finalRunStates, s)
}

// JoinRunStates is states for a message or a usage text, in their order:
// "A, B, C" with last ", ", "A, B or C" with last " or ".
func JoinRunStates(states []RunState, last string) string {
	text := make([]string, len(states))
	for i, s := range states {
		text[i] = string(s)
	}
	if len(text) < 2 {
		return strings.Join(text, "")
	}
	return strings.Join(text[:len(text)-1], ", ") + last + text[len(text)-1]
}

// Valid reports whether s is one of the run states.
func (s RunState) Valid() bool {
	for _, r := range RunStates {
		if r == s {
			return true
		}
	}
	return false
}
