package core_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// legalEdges is the task state machine of DESIGN.md written out by hand, so
// that a change to core's table has to be made twice to pass.
var legalEdges = map[[2]core.TaskState]bool{
	{core.TaskPending, core.TaskReady}:      true,
	{core.TaskPending, core.TaskCancelled}:  true,
	{core.TaskReady, core.TaskRunning}:      true,
	{core.TaskReady, core.TaskDead}:         true, // an outbox drop buries it
	{core.TaskReady, core.TaskCancelled}:    true,
	{core.TaskRunning, core.TaskSucceeded}:  true,
	{core.TaskRunning, core.TaskRetrying}:   true,
	{core.TaskRunning, core.TaskDead}:       true,
	{core.TaskRunning, core.TaskCancelled}:  true,
	{core.TaskRetrying, core.TaskReady}:     true,
	{core.TaskRetrying, core.TaskCancelled}: true,
	{core.TaskDead, core.TaskPending}:       true,
	{core.TaskCancelled, core.TaskPending}:  true,
	// a DEAD ancestor buries it; a requeue that leaves no ancestor DEAD
	// returns it
	{core.TaskPending, core.TaskUpstreamFailed}: true,
	{core.TaskUpstreamFailed, core.TaskPending}: true,
	// the scheduler's decision over a task with when, a trigger rule,
	// on_failure or for_each
	{core.TaskPending, core.TaskSkipped}:   true,
	{core.TaskPending, core.TaskRunning}:   true, // a for_each expanded
	{core.TaskPending, core.TaskDead}:      true, // an expression failed
	{core.TaskPending, core.TaskSucceeded}: true, // a for_each over []
	// a held wait: its timeout passed (on_timeout: skip), and it waits
	// again after its backoff
	{core.TaskRunning, core.TaskSkipped}:  true,
	{core.TaskRetrying, core.TaskRunning}: true,
	{core.TaskDead, core.TaskRunning}:     true, // a for_each whose DEAD element is requeued
}

func TestTransitionTableIsExhaustive(t *testing.T) {
	if got := len(core.TaskStates); got != 9 {
		t.Fatalf("len(TaskStates) = %d, want 9", got)
	}
	checked, legal := 0, 0
	for _, from := range core.TaskStates {
		for _, to := range core.TaskStates {
			checked++
			err := core.CheckTransition(from, to)
			if legalEdges[[2]core.TaskState{from, to}] {
				legal++
				if err != nil {
					t.Errorf("CheckTransition(%s, %s) = %v, want nil", from, to, err)
				}
				continue
			}
			assertIllegal(t, from, to, err)
		}
	}
	if checked != 81 || legal != len(legalEdges) {
		t.Fatalf("checked %d pairs (%d legal), want 81 (%d legal)", checked, legal, len(legalEdges))
	}
}

func TestTransitionRefusesUnknownStates(t *testing.T) {
	for _, tc := range []struct{ from, to core.TaskState }{
		{"", core.TaskReady},
		{core.TaskPending, ""},
		{"pending", core.TaskReady}, // case matters: the column stores upper case
		{core.TaskPending, "FAILED"},
		{"FAILED", core.TaskPending},
		{"BOGUS", "BOGUS"},
	} {
		assertIllegal(t, tc.from, tc.to, core.CheckTransition(tc.from, tc.to))
	}
	for _, s := range []core.TaskState{"", "pending", "FAILED", "BOGUS"} {
		if s.Valid() {
			t.Errorf("TaskState(%q).Valid() = true", s)
		}
	}
	for _, s := range core.TaskStates {
		if !s.Valid() {
			t.Errorf("TaskState(%q).Valid() = false", s)
		}
	}
}

func assertIllegal(t *testing.T, from, to core.TaskState, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("CheckTransition(%q, %q) = nil, want an error", from, to)
		return
	}
	if !errors.Is(err, core.ErrIllegalTransition) {
		t.Errorf("CheckTransition(%q, %q) = %v, does not match ErrIllegalTransition", from, to, err)
	}
	var te *core.TransitionError
	if !errors.As(err, &te) {
		t.Errorf("CheckTransition(%q, %q) = %T, want *core.TransitionError", from, to, err)
		return
	}
	if te.From != from || te.To != to {
		t.Errorf("TransitionError names %q -> %q, want %q -> %q", te.From, te.To, from, to)
	}
}

func TestTaskStateClassification(t *testing.T) {
	terminal := map[core.TaskState]bool{core.TaskSucceeded: true, core.TaskDead: true, core.TaskCancelled: true, core.TaskUpstreamFailed: true, core.TaskSkipped: true}
	active := map[core.TaskState]bool{core.TaskReady: true, core.TaskRunning: true, core.TaskRetrying: true}
	for _, s := range core.TaskStates {
		if s.Terminal() != terminal[s] {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
		if s.Active() != active[s] {
			t.Errorf("%s.Active() = %v", s, s.Active())
		}
	}
	for _, r := range core.RunStates {
		want := r == core.RunSucceeded || r == core.RunFailed || r == core.RunCancelled
		if r.Terminal() != want || !r.Valid() {
			t.Errorf("%s: Terminal() = %v, Valid() = %v", r, r.Terminal(), r.Valid())
		}
	}
	if core.RunState("DONE").Valid() {
		t.Error(`RunState("DONE").Valid() = true`)
	}
}

// TestFinalRunStatesAreTheCallersAndReadAsText: FinalRunStates is the
// terminal run states in RunStates' order, a slice the caller may change
// without changing the list; JoinRunStates spells a list for messages.
func TestFinalRunStatesAreTheCallersAndReadAsText(t *testing.T) {
	got := core.FinalRunStates()
	if want := []core.RunState{core.RunSucceeded, core.RunFailed, core.RunCancelled}; !slices.Equal(got, want) {
		t.Fatalf("FinalRunStates() = %v, want %v", got, want)
	}
	got[0] = core.RunPending
	if core.RunPending.Terminal() || !core.RunSucceeded.Terminal() {
		t.Fatal("changing the slice FinalRunStates returned changed the list")
	}
	for _, c := range []struct {
		states []core.RunState
		last   string
		want   string
	}{
		{core.FinalRunStates(), ", ", "SUCCEEDED, FAILED, CANCELLED"},
		{core.FinalRunStates(), " or ", "SUCCEEDED, FAILED or CANCELLED"},
		{[]core.RunState{core.RunFailed}, " or ", "FAILED"},
		{nil, " or ", ""},
	} {
		if got := core.JoinRunStates(c.states, c.last); got != c.want {
			t.Errorf("JoinRunStates(%v, %q) = %q, want %q", c.states, c.last, got, c.want)
		}
	}
}
