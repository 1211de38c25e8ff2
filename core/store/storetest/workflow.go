package storetest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Apply parses the workflow definition src (YAML) and stores it in s,
// failing the test on a parse or store error; it returns the stored
// workflow.
func Apply(t testing.TB, s *store.Store, src string) store.Workflow {
	t.Helper()
	def, err := core.ParseDefinition([]byte(src))
	if err != nil {
		t.Fatalf("parse workflow: %v", err)
	}
	wf, _, err := s.ApplyWorkflow(context.Background(), def)
	if err != nil {
		t.Fatalf("apply workflow: %v", err)
	}
	return wf
}

// Trigger starts a run of workflow (its latest version) with params, a JSON
// object ("" means {}), as actor "test", failing the test on an error; it
// returns the run's id.
func Trigger(t testing.TB, s *store.Store, workflow, params string) uuid.UUID {
	t.Helper()
	var p json.RawMessage
	if params != "" {
		p = json.RawMessage(params)
	}
	res, err := s.Trigger(context.Background(), store.TriggerRequest{Workflow: workflow, Params: p, Actor: "test"})
	if err != nil {
		t.Fatalf("trigger %s: %v", workflow, err)
	}
	return res.RunID
}

// Task returns the task called name of run, with its history, failing the
// test if the run cannot be read or has no such task.
func Task(t testing.TB, s *store.Store, run uuid.UUID, name string) store.TaskDetail {
	t.Helper()
	ctx := context.Background()
	r, err := s.GetRun(ctx, run)
	if err != nil {
		t.Fatalf("get run %s: %v", run, err)
	}
	for _, tr := range r.Tasks {
		if tr.Name == name {
			d, err := s.GetTask(ctx, tr.ID)
			if err != nil {
				t.Fatalf("get task %s: %v", tr.ID, err)
			}
			return d
		}
	}
	t.Fatalf("run %s has no task %q", run, name)
	return store.TaskDetail{}
}
