package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

func (f *fixture) rowsWritten() int {
	return f.count(`SELECT (SELECT count(*) FROM workflow_runs) + (SELECT count(*) FROM task_runs) + (SELECT count(*) FROM outbox)`)
}

func TestTriggerRefusesBadParamsAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	for name, params := range map[string]string{
		"NUL escape":        `{"day":"a\u0000b"}`,
		"NUL in a key":      `{"d\u0000y":"x"}`,
		"not JSON":          `{"day":`,
		"an array":          `["day"]`,
		"too big":           `{"day":"` + strings.Repeat("x", core.MaxParamsBytes) + `"}`,
		"missing key param": `{"night":"x"}`,
	} {
		_, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "keyed", Params: json.RawMessage(params), Actor: "test"})
		if !errors.Is(err, core.ErrBadParams) {
			t.Errorf("%s: %v, want core.ErrBadParams", name, err)
		}
	}
	if n := f.rowsWritten(); n != 0 {
		t.Fatalf("%d rows written by refused triggers", n)
	}
}

// TestTriggerRefusesParamsJSONBCannotStore: params that are JSON to Go but
// not to PostgreSQL's jsonb must be refused as bad params (exit 2 at the
// CLI), not fail inside the transaction as a database error.
func TestTriggerRefusesParamsJSONBCannotStore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	for name, params := range map[string]string{
		"invalid UTF-8":  "{\"day\":\"\xff\"}",
		"lone surrogate": `{"day":"\ud800"}`,
		"trailing ]":     `{"day":"x"}]`,
	} {
		_, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "one", Params: json.RawMessage(params)})
		if !errors.Is(err, core.ErrBadParams) {
			t.Errorf("%s: %v, want core.ErrBadParams", name, err)
		}
	}
	if n := f.rowsWritten(); n != 0 {
		t.Fatalf("%d rows written by refused triggers", n)
	}
}

func TestTriggerOfAnUnknownWorkflow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "ghost"})
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("%v, want ErrNotFound naming the workflow", err)
	}
	f.apply(oneTask)
	if _, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "one", Version: 2}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown version: %v, want ErrNotFound", err)
	}
	if n := f.rowsWritten(); n != 0 {
		t.Fatalf("%d rows written", n)
	}
}

func TestTriggerIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	f.apply(diamond)
	req := store.TriggerRequest{Workflow: "one", Params: json.RawMessage(`{"a":1,"b":[1,2]}`), IdempotencyKey: "req-1", Actor: "test"}
	first, err := f.s.Trigger(f.ctx, req)
	if err != nil || first.Existing {
		t.Fatalf("first trigger: %+v %v", first, err)
	}
	// The same params, written differently, are the same params.
	req.Params = json.RawMessage(`{ "b": [1, 2], "a": 1 }`)
	again, err := f.s.Trigger(f.ctx, req)
	if err != nil || !again.Existing || again.RunID != first.RunID {
		t.Fatalf("repeat trigger: %+v %v; want Existing with run %s", again, err, first.RunID)
	}
	req.Params = json.RawMessage(`{"a":2,"b":[1,2]}`)
	if _, err := f.s.Trigger(f.ctx, req); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("different params: %v, want ErrConflict", err)
	}
	if _, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "diamond", Params: json.RawMessage(`{"a":1,"b":[1,2]}`), IdempotencyKey: "req-1"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("another workflow: %v, want ErrConflict", err)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox`); n != 1 {
		t.Fatalf("%d outbox rows, want 1", n)
	}
}

func TestConcurrentTriggersWithOneKeyMakeOneRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	ids := make([]string, 10)
	together(len(ids), func(i int) {
		res, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "one", Params: json.RawMessage(`{"x":1}`), IdempotencyKey: "same"})
		if err != nil {
			t.Errorf("trigger %d: %v", i, err)
			return
		}
		ids[i] = res.RunID.String()
	})
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("triggers returned different runs: %v", ids)
		}
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

func TestTriggerWritesRootsReadyWithTheirOutboxRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	runID := f.trigger("diamond", `{"day":"mon"}`)
	r := f.run(runID)
	if r.State != "RUNNING" || r.StartedAt == nil || r.Workflow != "diamond" || r.WorkflowVersion != 1 || r.TasksTotal != 4 || string(r.Params) != `{"day": "mon"}` {
		t.Fatalf("run %+v", r)
	}
	ts := f.tasks(runID)
	for n, want := range map[string]core.TaskState{"a": core.TaskReady, "b": core.TaskPending, "c": core.TaskPending, "d": core.TaskPending} {
		if ts[n].State != want || ts[n].MaxAttempts != core.MaxAttemptsDefault {
			t.Fatalf("task %s: %s max %d", n, ts[n].State, ts[n].MaxAttempts)
		}
	}
	if f.outboxRows(ts["a"].ID) != 1 || f.count(`SELECT count(*) FROM outbox`) != 1 {
		t.Fatal("want exactly one outbox row, for the root")
	}
}

func TestApplyWorkflowVersions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	def, err := core.ParseDefinition([]byte(oneTask))
	if err != nil {
		t.Fatal(err)
	}
	wf, created, err := f.s.ApplyWorkflow(f.ctx, def)
	if err != nil || !created || wf.Version != 1 {
		t.Fatalf("first apply: v%d created=%v %v", wf.Version, created, err)
	}
	// The same definition, parsed again from JSON: a no-op.
	same, err := core.ParseDefinition([]byte(`{"name":"one","tasks":[{"name":"a","handler":"noop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wf, created, err = f.s.ApplyWorkflow(f.ctx, same)
	if err != nil || created || wf.Version != 1 {
		t.Fatalf("unchanged apply: v%d created=%v %v; want v1, created=false", wf.Version, created, err)
	}
	changed, err := core.ParseDefinition([]byte("name: one\ntasks:\n  - {name: a, handler: noop, timeout: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	wf, created, err = f.s.ApplyWorkflow(f.ctx, changed)
	if err != nil || !created || wf.Version != 2 || wf.Definition.Tasks[0].TimeoutOrZero().Seconds() != 5 {
		t.Fatalf("changed apply: v%d created=%v %v", wf.Version, created, err)
	}
	got, err := f.s.GetWorkflow(f.ctx, "one", 0)
	if err != nil || got.Version != 2 {
		t.Fatalf("newest: v%d %v", got.Version, err)
	}
	got, err = f.s.GetWorkflow(f.ctx, "one", 1)
	if err != nil || got.Version != 1 || got.Definition.Tasks[0].Timeout != nil {
		t.Fatalf("v1: %+v %v", got, err)
	}
	// A trigger uses the newest version.
	runID := f.trigger("one", "")
	if r := f.run(runID); r.WorkflowVersion != 2 {
		t.Fatalf("run of version %d, want 2", r.WorkflowVersion)
	}
	if _, _, err := f.s.ApplyWorkflow(f.ctx, &core.Definition{Name: "Bad Name"}); !errors.Is(err, core.ErrBadWorkflow) {
		t.Fatalf("apply of an invalid definition: %v", err)
	}
}

func TestConcurrentAppliesOfOneChangeMakeOneVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	changed, err := core.ParseDefinition([]byte("name: one\ntasks:\n  - {name: a, handler: sleep}\n"))
	if err != nil {
		t.Fatal(err)
	}
	together(8, func(int) {
		if _, _, err := f.s.ApplyWorkflow(f.ctx, changed); err != nil {
			t.Errorf("apply: %v", err)
		}
	})
	if n := f.count(`SELECT count(*) FROM workflows WHERE name = 'one'`); n != 2 {
		t.Fatalf("%d versions, want 2", n)
	}
}
