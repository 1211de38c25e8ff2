package core_test

import (
	"testing"

	"github.com/flowforge/flowforge/core"
)

// oracleDecide is Airflow's trigger rules as the issue states them,
// written apart from core's Decide: which outcomes of the upstream tasks
// let the task run, skip it or fail it.
func oracleDecide(rule core.TriggerRule, s, k, f, c, o int) core.Decision {
	if o > 0 || c > 0 {
		return core.DecideWait
	}
	if s+k+f == 0 {
		return core.DecideRun
	}
	run, skip := false, false
	switch rule {
	case core.RuleAllSuccess:
		run, skip = f == 0 && k == 0, f == 0
	case core.RuleAllDone:
		run = true
	case core.RuleOneSuccess:
		run, skip = s > 0, f == 0
	case core.RuleNoneFailed:
		run = f == 0
	}
	switch {
	case run:
		return core.DecideRun
	case skip:
		return core.DecideSkip
	}
	return core.DecideUpstreamFailed
}

func TestTriggerRulesDecideExhaustively(t *testing.T) {
	t.Parallel()
	cases := 0
	for _, rule := range core.TriggerRules {
		for s := range 3 {
			for k := range 3 {
				for f := range 3 {
					for c := range 2 {
						for o := range 2 {
							cases++
							u := core.UpstreamCounts{Succeeded: s, Skipped: k, Failed: f, Cancelled: c, Open: o}
							if got, want := rule.Decide(u), oracleDecide(rule, s, k, f, c, o); got != want {
								t.Errorf("%s.Decide(%+v) = %s, want %s", rule, u, got, want)
							}
						}
					}
				}
			}
		}
	}
	if cases != 4*3*3*3*2*2 {
		t.Fatalf("checked %d cases", cases)
	}
}

func TestTriggerRuleNamedCases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rule core.TriggerRule
		u    core.UpstreamCounts
		want core.Decision
	}{
		{"all_success skips below a skipped upstream", core.RuleAllSuccess, core.UpstreamCounts{Succeeded: 1, Skipped: 1}, core.DecideSkip},
		{"all_success fails below a dead upstream", core.RuleAllSuccess, core.UpstreamCounts{Skipped: 1, Failed: 1}, core.DecideUpstreamFailed},
		{"all_done runs below a skipped and a failed branch", core.RuleAllDone, core.UpstreamCounts{Skipped: 1, Failed: 1}, core.DecideRun},
		{"none_failed runs below a skipped branch", core.RuleNoneFailed, core.UpstreamCounts{Succeeded: 1, Skipped: 1}, core.DecideRun},
		{"none_failed fails below a failed branch", core.RuleNoneFailed, core.UpstreamCounts{Skipped: 1, Failed: 1}, core.DecideUpstreamFailed},
		{"one_success runs with one success", core.RuleOneSuccess, core.UpstreamCounts{Succeeded: 1, Failed: 1}, core.DecideRun},
		{"one_success skips when all skipped", core.RuleOneSuccess, core.UpstreamCounts{Skipped: 2}, core.DecideSkip},
		{"every rule waits for an open upstream", core.RuleAllDone, core.UpstreamCounts{Succeeded: 1, Open: 1}, core.DecideWait},
		{"a cancelled upstream leaves it waiting", core.RuleAllDone, core.UpstreamCounts{Cancelled: 1}, core.DecideWait},
		{"a root runs", core.RuleOneSuccess, core.UpstreamCounts{}, core.DecideRun},
	} {
		if got := tc.rule.Decide(tc.u); got != tc.want {
			t.Errorf("%s: %s.Decide(%+v) = %s, want %s", tc.name, tc.rule, tc.u, got, tc.want)
		}
	}
}

func TestOnFailureRunsOnlyInAFailingRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		failing, ended bool
		want           core.Decision
	}{
		{true, false, core.DecideRun},
		{true, true, core.DecideRun},
		{false, true, core.DecideSkip},
		{false, false, core.DecideWait},
	} {
		if got := core.DecideOnFailure(tc.failing, tc.ended); got != tc.want {
			t.Errorf("DecideOnFailure(failing %v, ended %v) = %s, want %s", tc.failing, tc.ended, got, tc.want)
		}
	}
}

func TestParseTriggerRule(t *testing.T) {
	t.Parallel()
	if r, err := core.ParseTriggerRule(""); err != nil || r != core.RuleAllSuccess {
		t.Errorf(`ParseTriggerRule("") = %q, %v`, r, err)
	}
	if _, err := core.ParseTriggerRule("any_success"); err == nil || err.Error() != `unknown trigger_rule "any_success" (want all_success, all_done, one_success or none_failed)` {
		t.Errorf("ParseTriggerRule(any_success) = %v", err)
	}
	for _, r := range core.TriggerRules {
		if got, err := core.ParseTriggerRule(string(r)); err != nil || got != r {
			t.Errorf("ParseTriggerRule(%s) = %q, %v", r, got, err)
		}
	}
	if !core.RuleAllDone.ToleratesFailure() || !core.RuleOneSuccess.ToleratesFailure() || core.RuleAllSuccess.ToleratesFailure() || core.RuleNoneFailed.ToleratesFailure() {
		t.Error("ToleratesFailure: want all_done and one_success only")
	}
}
