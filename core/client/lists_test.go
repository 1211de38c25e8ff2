package client_test

import (
	"errors"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
)

// TestListsRefuseFiltersThatSelectNothingAndReturnEmptyLists: a bad
// workflow name, a bad state, a limit out of bounds, a negative age and a
// malformed run id are ErrInvalidInput; a run id of no run ErrNotFound;
// lists with nothing in them are empty, not nil (JSON []).
func TestListsRefuseFiltersThatSelectNothingAndReturnEmptyLists(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"runs: bad workflow", second(f.c.ListRuns(f.ctx, client.RunFilter{Workflow: "Bad Name"})), client.ErrInvalidInput},
		{"runs: bad state", second(f.c.ListRuns(f.ctx, client.RunFilter{State: "DONE"})), client.ErrInvalidInput},
		{"dead: bad workflow", second(f.c.ListDead(f.ctx, client.DeadFilter{Workflow: "a b"})), client.ErrInvalidInput},
		{"dead: limit", second(f.c.ListDead(f.ctx, client.DeadFilter{Limit: client.ListLimitMax + 1})), client.ErrInvalidInput},
		{"dead: negative age", second(f.c.ListDead(f.ctx, client.DeadFilter{OlderThan: -1})), client.ErrInvalidInput},
		{"dead: malformed run", second(f.c.ListDead(f.ctx, client.DeadFilter{Run: "xyz"})), client.ErrInvalidInput},
		{"dead: no such run", second(f.c.ListDead(f.ctx, client.DeadFilter{Run: "0b7c6d2e"})), client.ErrNotFound},
		{"workflows: limit", second(f.c.ListWorkflows(f.ctx, -1)), client.ErrInvalidInput},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	dead, err := f.c.ListDead(f.ctx, client.DeadFilter{Workflow: "one"})
	if err != nil || dead == nil || len(dead) != 0 {
		t.Fatalf("dead = %#v, %v; want an empty list", dead, err)
	}
	wfs, err := f.c.ListWorkflows(f.ctx, 0)
	if err != nil || len(wfs) != 3 || wfs[0].Name != "keyed" {
		t.Fatalf("workflows = %+v, %v", wfs, err)
	}
	if _, err := f.c.ListRuns(f.ctx, client.RunFilter{State: core.RunFailed, Workflow: "one"}); err != nil {
		t.Fatal(err)
	}
}
