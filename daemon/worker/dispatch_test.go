package worker_test

import (
	"errors"
	"testing"

	"github.com/flowforge/flowforge/daemon/worker"
)

const (
	dispatchTaskRunID = "6f1c3e0e-6a63-4d3a-9a55-6f6b7cf1a001"
	dispatchRunID     = "6f1c3e0e-6a63-4d3a-9a55-6f6b7cf1a002"
)

// TestDecodeDispatchIgnoresUnknownFieldsAndRequiresTheKnownOnes: a message
// from a newer scheduler (an extra field) decodes; one that lacks or breaks
// a required field is ErrBadDispatch.
func TestDecodeDispatchIgnoresUnknownFieldsAndRequiresTheKnownOnes(t *testing.T) {
	cases := []struct {
		name string
		body string
		ok   bool
	}{
		{"today's message", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a", "handler": "noop"}`, true},
		{"without the optional handler", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a"}`, true},
		{"a field from the future", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a", "handler": "noop", "future_field": 1}`, true},
		{"a structured field from the future", `{"future": {"x": [1, 2]}, "task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a"}`, true},
		{"no task_run_id", `{"run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a"}`, false},
		{"no run_id", `{"task_run_id": "` + dispatchTaskRunID + `", "fencing_token": 3, "task": "a"}`, false},
		{"no task", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3}`, false},
		{"zero token", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 0, "task": "a"}`, false},
		{"a known field of the wrong type", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": "3", "task": "a"}`, false},
		{"an extra field but nothing required", `{"surprise": true}`, false},
		{"trailing data", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a"} {}`, false},
		{"not an object", `[1, 2]`, false},
		{"not JSON", `nope`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := worker.DecodeDispatch([]byte(c.body))
			if c.ok {
				if err != nil {
					t.Fatalf("DecodeDispatch: %v", err)
				}
				if d.TaskRunID.String() != dispatchTaskRunID || d.RunID.String() != dispatchRunID || d.FencingToken != 3 || d.Task != "a" {
					t.Fatalf("decoded %+v", d)
				}
				return
			}
			if !errors.Is(err, worker.ErrBadDispatch) {
				t.Fatalf("DecodeDispatch = %+v, %v; want ErrBadDispatch", d, err)
			}
		})
	}
}
