package core

import (
	"fmt"
	"strings"
)

// TriggerRule says when a task with upstream tasks runs, once each of them
// has ended (Airflow's meanings, with SKIPPED upstream tasks):
//
//   - all_success (the default): every upstream SUCCEEDED; a SKIPPED one
//     skips the task, a DEAD (or UPSTREAM_FAILED) one makes it
//     UPSTREAM_FAILED;
//   - all_done: whatever they ended as (SUCCEEDED, SKIPPED, DEAD,
//     UPSTREAM_FAILED), the task runs;
//   - one_success: at least one SUCCEEDED; else UPSTREAM_FAILED when one
//     failed, SKIPPED when all were skipped;
//   - none_failed: none is DEAD or UPSTREAM_FAILED (SKIPPED ones are
//     fine); else UPSTREAM_FAILED.
//
// An upstream task CANCELLED (a fail_fast run's) leaves the task waiting,
// as it always did: such a run is failing, and fail_fast cancels the task
// in turn.
type TriggerRule string

// The trigger rules.
const (
	RuleAllSuccess TriggerRule = "all_success"
	RuleAllDone    TriggerRule = "all_done"
	RuleOneSuccess TriggerRule = "one_success"
	RuleNoneFailed TriggerRule = "none_failed"
)

// TriggerRules lists the rules, the default first.
var TriggerRules = []TriggerRule{RuleAllSuccess, RuleAllDone, RuleOneSuccess, RuleNoneFailed}

// Valid reports whether r is one of TriggerRules.
func (r TriggerRule) Valid() bool {
	for _, v := range TriggerRules {
		if v == r {
			return true
		}
	}
	return false
}

// ToleratesFailure reports whether a task with rule r may run below a DEAD
// task (all_done, one_success): the statements that bury a DEAD task's
// descendants as UPSTREAM_FAILED stop at such a task and leave it to the
// scheduler's decision.
func (r TriggerRule) ToleratesFailure() bool {
	return r == RuleAllDone || r == RuleOneSuccess
}

// triggerRuleList is the rules for an error message: "a, b, c or d".
func triggerRuleList() string {
	s := make([]string, len(TriggerRules))
	for i, r := range TriggerRules {
		s[i] = string(r)
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// ParseTriggerRule returns the rule named s ("" is the default,
// all_success), or an error naming the rules.
func ParseTriggerRule(s string) (TriggerRule, error) {
	if s == "" {
		return RuleAllSuccess, nil
	}
	if r := TriggerRule(s); r.Valid() {
		return r, nil
	}
	return "", fmt.Errorf("unknown trigger_rule %q (want %s)", s, triggerRuleList())
}

// Decision is what the scheduler does with a PENDING task it examines.
type Decision int

// The decisions.
const (
	// DecideWait: not yet (an upstream task has not ended, or one was
	// CANCELLED).
	DecideWait Decision = iota
	// DecideRun: the task runs (after its `when`, if it has one).
	DecideRun
	// DecideSkip: the task is SKIPPED.
	DecideSkip
	// DecideUpstreamFailed: the task is UPSTREAM_FAILED.
	DecideUpstreamFailed
)

// String names d.
func (d Decision) String() string {
	return [...]string{"wait", "run", "skip", "upstream_failed"}[d]
}

// UpstreamCounts counts a task's direct upstream tasks by how they stand:
// Failed is DEAD or UPSTREAM_FAILED, Open any state that is not terminal.
type UpstreamCounts struct {
	Succeeded, Skipped, Failed, Cancelled, Open int
}

// CountUpstream adds one upstream task in state s to c.
func (c *UpstreamCounts) CountUpstream(s TaskState) {
	switch s {
	case TaskSucceeded:
		c.Succeeded++
	case TaskSkipped:
		c.Skipped++
	case TaskDead, TaskUpstreamFailed:
		c.Failed++
	case TaskCancelled:
		c.Cancelled++
	default:
		c.Open++
	}
}

// Decide applies rule r to a task's upstream tasks u. A task without
// upstream tasks runs. It decides only once every upstream task has ended
// (none Open) and none was CANCELLED; until then it waits.
func (r TriggerRule) Decide(u UpstreamCounts) Decision {
	switch {
	case u.Open > 0 || u.Cancelled > 0:
		return DecideWait
	case u.Succeeded+u.Skipped+u.Failed == 0:
		return DecideRun
	}
	switch r {
	case RuleAllDone:
		return DecideRun
	case RuleOneSuccess:
		if u.Succeeded > 0 {
			return DecideRun
		}
		if u.Failed > 0 {
			return DecideUpstreamFailed
		}
		return DecideSkip
	case RuleNoneFailed:
		if u.Failed > 0 {
			return DecideUpstreamFailed
		}
		return DecideRun
	}
	// all_success, and any rule an older or newer binary stored.
	if u.Failed > 0 {
		return DecideUpstreamFailed
	}
	if u.Skipped > 0 {
		return DecideSkip
	}
	return DecideRun
}

// DecideOnFailure decides an on_failure task: it runs once its run is
// failing (a task of it is DEAD: the failing task has settled, its
// downstream buried with it), is SKIPPED once every other task of the run
// has ended without the run failing, and waits otherwise.
func DecideOnFailure(runFailing, othersEnded bool) Decision {
	switch {
	case runFailing:
		return DecideRun
	case othersEnded:
		return DecideSkip
	}
	return DecideWait
}
