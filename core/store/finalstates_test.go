package store_test

import (
	"slices"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestTheSQLFinalRunStatesAreCores: of every run state, the ones the
// store's SQL takes for final (r.state IN finalRunStatesSQL, as the
// settled conditions of the pruner and of run delete test it) are exactly
// core.FinalRunStates.
func TestTheSQLFinalRunStatesAreCores(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var all []string
	for _, s := range core.RunStates {
		all = append(all, string(s))
	}
	got := f.payloads(`SELECT r.state FROM unnest($1::text[]) WITH ORDINALITY AS r(state, i)
 WHERE r.state IN `+store.FinalRunStatesSQL+` ORDER BY r.i`, all)
	var want []string
	for _, s := range core.FinalRunStates() {
		want = append(want, string(s))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the SQL takes %q for final (%s), core.FinalRunStates is %q", got, store.FinalRunStatesSQL, want)
	}
}
