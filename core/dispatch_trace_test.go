package core_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

const dispatchTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestADispatchCarriesItsTraceparentOnlyWhenTraced: a Dispatch with a
// traceparent round-trips through JSON; one without writes no field at
// all (an untraced run's message is unchanged).
func TestADispatchCarriesItsTraceparentOnlyWhenTraced(t *testing.T) {
	base := core.Dispatch{V: core.DispatchVersion, TaskRunID: uuid.MustParse(dispatchTaskRunID), RunID: uuid.MustParse(dispatchRunID), FencingToken: 3, Task: "t", Handler: "h"}
	traced := base
	traced.Traceparent = dispatchTraceparent
	for _, tc := range []struct {
		name      string
		d         core.Dispatch
		wantField bool
	}{
		{"traced", traced, true},
		{"untraced", base, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := json.Marshal(tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(body), `"traceparent"`); got != tc.wantField {
				t.Fatalf("body %s has a traceparent field: %v, want %v", body, got, tc.wantField)
			}
			got, err := core.DecodeDispatch(body)
			if err != nil {
				t.Fatalf("DecodeDispatch(%s): %v", body, err)
			}
			if got != tc.d {
				t.Fatalf("decoded %+v, want %+v", got, tc.d)
			}
		})
	}
}

// TestAMalformedTraceparentIsIgnoredNotPoison: whatever the traceparent
// field holds, the dispatch decodes (a message is never poison for its
// trace context); a string is kept as is (the tracer's parser ignores a
// malformed one), any other type reads as none.
func TestAMalformedTraceparentIsIgnoredNotPoison(t *testing.T) {
	head := `{"v":2,"task_run_id":"` + dispatchTaskRunID + `","run_id":"` + dispatchRunID + `","fencing_token":1,"task":"t","handler":"h"`
	for _, tc := range []struct {
		name, field, want string
	}{
		{"absent (an older scheduler)", ``, ""},
		{"valid", `,"traceparent":"` + dispatchTraceparent + `"`, dispatchTraceparent},
		{"garbage string", `,"traceparent":"not-a-trace"`, "not-a-trace"},
		{"null", `,"traceparent":null`, ""},
		{"a number", `,"traceparent":42`, ""},
		{"an object", `,"traceparent":{"a":1}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(head + tc.field + `}`)
			got, err := core.DecodeDispatch(body)
			if err != nil {
				t.Fatalf("DecodeDispatch(%s) = %v, want no error", body, err)
			}
			if got.Traceparent != tc.want {
				t.Fatalf("Traceparent = %q, want %q", got.Traceparent, tc.want)
			}
			h, tp := core.DispatchRoute(body)
			if h != "h" || tp != tc.want {
				t.Fatalf("DispatchRoute(%s) = %q, %q; want %q, %q", body, h, tp, "h", tc.want)
			}
		})
	}
}
