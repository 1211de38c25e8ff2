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
