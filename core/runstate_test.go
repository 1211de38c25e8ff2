package core_test

import (
	"fmt"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// oracleRunState is DESIGN.md's precedence, written independently of
// core.DeriveRunState.
func oracleRunState(counts [9]int, cancelRequested bool) core.RunState {
	pending, succeeded, dead, upstreamFailed, skipped, total := counts[0], counts[3], counts[5], counts[7], counts[8], 0
	for _, n := range counts {
		total += n
	}
	if cancelRequested {
		return core.RunCancelled
	}
	if dead > 0 || upstreamFailed > 0 {
		return core.RunFailed
	}
	if total > 0 && succeeded+skipped == total {
		return core.RunSucceeded
	}
	if pending == total {
		return core.RunPending
	}
	if counts[6] > 0 && oracleSettled(counts) {
		return core.RunCancelled
	}
	return core.RunRunning
}

// oracleSettled: nothing READY, RUNNING or RETRYING.
func oracleSettled(counts [9]int) bool {
	return counts[1] == 0 && counts[2] == 0 && counts[4] == 0
}

func TestDeriveRunStateExhaustive(t *testing.T) {
	// core.TaskStates is in lifecycle order; the oracle indexes by it.
	want := []core.TaskState{core.TaskPending, core.TaskReady, core.TaskRunning, core.TaskSucceeded, core.TaskRetrying, core.TaskDead, core.TaskCancelled, core.TaskUpstreamFailed, core.TaskSkipped}
	for i, s := range want {
		if core.TaskStates[i] != s {
			t.Fatalf("TaskStates[%d] = %s, want %s", i, core.TaskStates[i], s)
		}
	}
	cases := 0
	var counts [9]int
	var rec func(i int)
	rec = func(i int) {
		if i == len(counts) {
			for _, cancel := range []bool{false, true} {
				cases++
				tc := core.TaskCounts{}
				for j, n := range counts {
					if n > 0 || j%2 == 0 { // zero entries present or absent must not matter
						tc[core.TaskStates[j]] = n
					}
				}
				if got, want := core.DeriveRunState(tc, cancel), oracleRunState(counts, cancel); got != want {
					t.Errorf("DeriveRunState(%v, cancel=%v) = %s, want %s", tc, cancel, got, want)
				}
				if got, want := core.RunSettled(tc), oracleSettled(counts); got != want {
					t.Errorf("RunSettled(%v) = %v, want %v", tc, got, want)
				}
			}
			return
		}
		for n := 0; n <= 2; n++ {
			counts[i] = n
			rec(i + 1)
		}
	}
	rec(0)
	if cases != 39366 {
		t.Fatalf("checked %d cases, want 3^9*2 = 39366", cases)
	}
}

func TestDeriveRunStateNamedCases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		counts  core.TaskCounts
		cancel  bool
		want    core.RunState
		settled bool
	}{
		{"empty run is pending", core.TaskCounts{}, false, core.RunPending, true},
		{"nil counts is pending", nil, false, core.RunPending, true},
		{"all pending", core.TaskCounts{core.TaskPending: 3}, false, core.RunPending, true},
		{"one ready", core.TaskCounts{core.TaskPending: 2, core.TaskReady: 1}, false, core.RunRunning, false},
		{"dead while siblings run is failed at once", core.TaskCounts{core.TaskDead: 1, core.TaskRunning: 2, core.TaskPending: 1}, false, core.RunFailed, false},
		{"dead with blocked dependents settles failed", core.TaskCounts{core.TaskDead: 1, core.TaskSucceeded: 1, core.TaskPending: 2}, false, core.RunFailed, true},
		{"requeue reopens: dead became pending, siblings succeeded", core.TaskCounts{core.TaskPending: 1, core.TaskSucceeded: 2}, false, core.RunRunning, true},
		{"requeue of the only task reopens to pending", core.TaskCounts{core.TaskPending: 1}, false, core.RunPending, true},
		{"all succeeded", core.TaskCounts{core.TaskSucceeded: 4}, false, core.RunSucceeded, true},
		{"settled with a cancelled task and no dead one is cancelled", core.TaskCounts{core.TaskSucceeded: 1, core.TaskCancelled: 1}, false, core.RunCancelled, true},
		{"running with a cancelled task is running", core.TaskCounts{core.TaskRunning: 1, core.TaskCancelled: 1}, false, core.RunRunning, false},
		{"cancel wins over dead", core.TaskCounts{core.TaskDead: 1}, true, core.RunCancelled, true},
		{"cancel wins over succeeded", core.TaskCounts{core.TaskSucceeded: 1}, true, core.RunCancelled, true},
		{"cancelled with a task still running is not settled", core.TaskCounts{core.TaskRunning: 1, core.TaskCancelled: 2}, true, core.RunCancelled, false},
		{"retrying is running", core.TaskCounts{core.TaskRetrying: 1}, false, core.RunRunning, false},
		{"dead with upstream-failed dependents settles failed", core.TaskCounts{core.TaskDead: 1, core.TaskSucceeded: 1, core.TaskUpstreamFailed: 2}, false, core.RunFailed, true},
		{"upstream failed while a sibling runs is failed, not settled", core.TaskCounts{core.TaskDead: 1, core.TaskUpstreamFailed: 1, core.TaskRunning: 1}, false, core.RunFailed, false},
		{"fail_fast: upstream failed and cancelled siblings settle failed", core.TaskCounts{core.TaskDead: 1, core.TaskUpstreamFailed: 1, core.TaskCancelled: 2}, false, core.RunFailed, true},
		{"upstream failed left by an older requeue is failed until revived", core.TaskCounts{core.TaskSucceeded: 1, core.TaskUpstreamFailed: 1}, false, core.RunFailed, true},
		{"succeeded and skipped is succeeded", core.TaskCounts{core.TaskSucceeded: 2, core.TaskSkipped: 1}, false, core.RunSucceeded, true},
		{"all skipped is succeeded", core.TaskCounts{core.TaskSkipped: 2}, false, core.RunSucceeded, true},
		{"skipped while a sibling runs is running", core.TaskCounts{core.TaskSkipped: 1, core.TaskRunning: 1}, false, core.RunRunning, false},
		{"skipped beside a dead task is failed", core.TaskCounts{core.TaskSkipped: 1, core.TaskDead: 1}, false, core.RunFailed, true},
		{"cancel wins over upstream failed", core.TaskCounts{core.TaskDead: 1, core.TaskUpstreamFailed: 1}, true, core.RunCancelled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := core.DeriveRunState(tc.counts, tc.cancel); got != tc.want {
				t.Errorf("DeriveRunState = %s, want %s", got, tc.want)
			}
			if got := core.RunSettled(tc.counts); got != tc.settled {
				t.Errorf("RunSettled = %v, want %v", got, tc.settled)
			}
		})
	}
}

func ExampleDeriveRunState() {
	fmt.Println(core.DeriveRunState(core.TaskCounts{core.TaskDead: 1, core.TaskRunning: 1}, false))
	// Output: FAILED
}

func TestRunEnded(t *testing.T) {
	t.Parallel()
	for _, s := range core.RunStates {
		for _, settled := range []bool{false, true} {
			want := settled && (s == core.RunSucceeded || s == core.RunFailed || s == core.RunCancelled)
			if got := core.RunEnded(s, settled); got != want {
				t.Errorf("RunEnded(%s, settled %v) = %v, want %v", s, settled, got, want)
			}
		}
	}
}
