package cli_test

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// TestTheRunStateListsAreCores: the states `run list --state` and `run
// delete` name in their help and their usage errors are core.RunStates
// and core.FinalRunStates, spelt by core.JoinRunStates.
func TestTheRunStateListsAreCores(t *testing.T) {
	t.Parallel()
	all := core.JoinRunStates(core.RunStates, ", ")
	final, finalOr := core.JoinRunStates(core.FinalRunStates(), ", "), core.JoinRunStates(core.FinalRunStates(), " or ")
	for _, c := range []struct {
		args []string
		out  func(result) string
		want []string
	}{
		{[]string{"run", "list", "--help"}, func(r result) string { return r.stdout }, []string{"only runs in this state (" + all + ")"}},
		{[]string{"run", "delete", "--help"}, func(r result) string { return r.stdout },
			[]string{"Only a run that has ended (" + finalOr + " with nothing left running)", "the final state of the runs to delete (" + final + ")"}},
		{[]string{"run", "delete", "--older-than", "1d"}, func(r result) string { return r.stderr }, []string{"say which final state (" + final + ") to delete"}},
		{[]string{"run", "delete", "--older-than", "1d", "--state", "running"}, func(r result) string { return r.stderr }, []string{"want " + finalOr}},
	} {
		r := ffNoDB(c.args...)
		for _, w := range c.want {
			if !strings.Contains(strings.Join(strings.Fields(c.out(r)), " "), w) {
				t.Errorf("ffctl %s lacks %q:\n%s", strings.Join(c.args, " "), w, r)
			}
		}
	}
}
