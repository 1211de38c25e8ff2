package core

// TaskCounts counts a run's tasks by state.
type TaskCounts map[TaskState]int

// Total returns the number of tasks counted.
func (c TaskCounts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// DeriveRunState computes a run's state from its tasks; it never guesses.
// Precedence, first match wins:
//
//  1. CANCELLED when the run's cancellation was requested;
//  2. FAILED when any task is DEAD or UPSTREAM_FAILED, even while siblings
//     still run (an UPSTREAM_FAILED task without a DEAD one only exists
//     between an older binary's requeue and the next scheduler pass, which
//     returns it to PENDING);
//  3. SUCCEEDED when every task SUCCEEDED or was SKIPPED (and there is at
//     least one);
//  4. PENDING when nothing has started: every task PENDING (an empty run too);
//  5. CANCELLED when nothing can run any more (RunSettled) and some task was
//     CANCELLED without a cancel request (a run settled so by an older
//     version: a requeue of a fail_fast run now returns the tasks fail_fast
//     cancelled to PENDING, see store.RequeueMany);
//  6. RUNNING otherwise.
//
// A requeued DEAD task therefore reopens a FAILED run by construction (the
// requeue returns its UPSTREAM_FAILED descendants to PENDING with it).
func DeriveRunState(counts TaskCounts, cancelRequested bool) RunState {
	total := counts.Total()
	switch {
	case cancelRequested:
		return RunCancelled
	case counts[TaskDead] > 0 || counts[TaskUpstreamFailed] > 0:
		return RunFailed
	case total > 0 && counts[TaskSucceeded]+counts[TaskSkipped] == total:
		return RunSucceeded
	case counts[TaskPending] == total:
		return RunPending
	case counts[TaskCancelled] > 0 && RunSettled(counts):
		return RunCancelled
	default:
		return RunRunning
	}
}

// RunSettled reports whether no task of the run can still change by itself:
// nothing is READY, RUNNING or RETRYING. Called after a promotion pass, the
// PENDING tasks left are blocked by a CANCELLED ancestor (the descendants of
// a DEAD task are UPSTREAM_FAILED, terminal).
func RunSettled(counts TaskCounts) bool {
	for s, n := range counts {
		if n > 0 && s.Active() {
			return false
		}
	}
	return true
}

// RunEnded reports whether a run has ended: its state is terminal and the
// scheduler has settled it (settled: workflow_runs.finished_at is set, so
// nothing is left READY, RUNNING or RETRYING). A FAILED run whose siblings
// still run has not ended yet, nor has a CANCELLED one whose running tasks
// are still being stopped; `ffctl run wait` waits for the end.
func RunEnded(state RunState, settled bool) bool {
	return state.Terminal() && settled
}
