package api_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/daemon/api"
)

// TestATriggersTraceparentHeaderIsTheRunsTrace: a valid W3C traceparent
// header on a trigger is the run's trace (stored on the run, which every
// dispatch then carries: the run continues the caller's trace); a
// malformed one is ignored (201, nothing stored), as is none.
func TestATriggersTraceparentHeaderIsTheRunsTrace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, oneTask)
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, header, want string
	}{
		{"valid", valid, valid},
		{"malformed", "00-not-a-trace-01", ""},
		{"all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"none", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.header != "" {
				h["traceparent"] = tc.header
			}
			a := f.do(call{method: "POST", path: "/v1/workflows/one/runs", role: auth.RoleOperator, body: `{}`, header: h})
			var res struct {
				RunID uuid.UUID `json:"run_id"`
			}
			a.json(t, &res)
			if a.status != http.StatusCreated {
				t.Fatalf("trigger: %d %s", a.status, a.body)
			}
			var got *string
			if err := f.db.QueryRowContext(f.ctx, `SELECT traceparent FROM workflow_runs WHERE id = $1`, res.RunID).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == "") || (got != nil && *got != tc.want) {
				t.Fatalf("the run's traceparent %v, want %q", got, tc.want)
			}
		})
	}
}
