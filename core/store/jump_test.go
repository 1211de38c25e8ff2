package store_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestFindByIDPrefixNamesTheOneRunOrTask: a whole id or a unique prefix
// finds its run or task, whichever kind it is; a prefix of two ids is
// ambiguous and names both, one of none is not found, and a malformed one
// is refused before any look-up.
func TestFindByIDPrefixNamesTheOneRunOrTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	run := uuid.MustParse("abcdef01-0000-4000-8000-000000000001")
	task := uuid.MustParse("abcdef01-1000-4000-8000-000000000002")
	alone := uuid.MustParse("12345678-0000-4000-8000-000000000003")
	f.sql(`INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state)
VALUES ($1, (SELECT id FROM workflows WHERE name = 'one'), 'one', 1, 'SUCCEEDED'),
       ($2, (SELECT id FROM workflows WHERE name = 'one'), 'one', 1, 'SUCCEEDED')`, run, alone)
	f.sql(`INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts) VALUES ($1, $2, 'a', 'noop', 'SUCCEEDED', 3)`, task, alone)
	for _, tc := range []struct {
		name, ref string
		want      store.IDMatch
		is        error
		err       string
	}{
		{"a whole run id", run.String(), store.IDMatch{Kind: "run", ID: run}, nil, ""},
		{"a whole task id", task.String(), store.IDMatch{Kind: "task", ID: task}, nil, ""},
		{"a unique run prefix", "1234567", store.IDMatch{Kind: "run", ID: alone}, nil, ""},
		{"a unique task prefix, dashed, upper case", " ABCDEF01-1 ", store.IDMatch{Kind: "task", ID: task}, nil, ""},
		{"a prefix of a run and a task", "abcdef01", store.IDMatch{}, store.ErrAmbiguous,
			"abcdef01 matches run abcdef01-0000-4000-8000-000000000001, task abcdef01-1000-4000-8000-000000000002: ambiguous id prefix"},
		{"a prefix of nothing", "fedcba98", store.IDMatch{}, store.ErrNotFound, "no run or task id starts with fedcba98: not found"},
		{"too short", "abcde", store.IDMatch{}, core.ErrBadIDPrefix, `"abcde": not a UUID or a prefix of one (want 6 to 32 hex digits)`},
	} {
		got, err := f.s.FindByIDPrefix(f.ctx, tc.ref)
		if tc.is == nil {
			if err != nil || got != tc.want {
				t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, tc.is) || err.Error() != tc.err || got != tc.want {
			t.Errorf("%s: %+v, %v; want %q wrapping %v", tc.name, got, err, tc.err, tc.is)
		}
	}
}
