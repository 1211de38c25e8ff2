package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestTriggerManyWritesEveryRunOrNone: a batch's runs are created in one
// transaction, each with its params, its roots READY with one outbox row
// each; a batch with one bad params object (or a task key its params cannot
// render) writes nothing and names the run.
func TestTriggerManyWritesEveryRunOrNone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	f.apply("name: keyed\ntasks:\n  - {name: a, handler: noop, idempotency_key: 'k-{{ .Params.day }}'}\n")
	params := []json.RawMessage{json.RawMessage(`{"day":"mon"}`), nil, json.RawMessage(`{"day":"tue","n":1}`)}
	ids, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "diamond", Params: params, Actor: "test"})
	if err != nil || len(ids) != 3 {
		t.Fatalf("trigger many: %v %v", ids, err)
	}
	wantParams := []string{`{"day": "mon"}`, `{}`, `{"n": 1, "day": "tue"}`}
	for i, id := range ids {
		r := f.run(id)
		if string(r.Params) != wantParams[i] || r.TasksTotal != 4 {
			t.Fatalf("run %d: params %s, %d tasks; want %s, 4", i, r.Params, r.TasksTotal, wantParams[i])
		}
		if ts := f.tasks(id); ts["a"].State != core.TaskReady || f.outboxRows(ts["a"].ID) != 1 || ts["d"].State != core.TaskPending {
			t.Fatalf("run %d: tasks %+v", i, ts)
		}
	}
	if n := f.count(`SELECT count(*) FROM outbox`); n != 3 {
		t.Fatalf("%d outbox rows, want 3 (one root per run)", n)
	}
	cases := []struct {
		name, workflow string
		params         []json.RawMessage
		index          int
	}{
		{"not an object", "diamond", []json.RawMessage{nil, json.RawMessage(`[1]`)}, 1},
		{"not JSON", "diamond", []json.RawMessage{json.RawMessage(`{`), nil}, 0},
		{"a NUL character", "diamond", []json.RawMessage{nil, nil, json.RawMessage(`{"a":"\u0000"}`)}, 2},
		{"a key its params cannot render", "keyed", []json.RawMessage{json.RawMessage(`{"day":"mon"}`), json.RawMessage(`{}`)}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.count(`SELECT count(*) FROM workflow_runs`)
			_, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: c.workflow, Params: c.params, Actor: "test"})
			var bad *store.BadRunError
			if !errors.Is(err, core.ErrBadParams) || !errors.As(err, &bad) || bad.Index != c.index {
				t.Fatalf("err = %v, want core.ErrBadParams for run index %d", err, c.index)
			}
			if after := f.count(`SELECT count(*) FROM workflow_runs`); after != before {
				t.Fatalf("%d runs written by a refused batch", after-before)
			}
		})
	}
	if _, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "nope", Params: []json.RawMessage{nil}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown workflow: %v, want ErrNotFound", err)
	}
	tooMany := make([]json.RawMessage, store.TriggerManyMax+1)
	if _, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "diamond", Params: tooMany}); !errors.Is(err, core.ErrBadParams) {
		t.Fatalf("%d runs: %v, want core.ErrBadParams", len(tooMany), err)
	}
}

// TestTriggerManyBoundsTheTaskRunsOfOneBatch: one statement carries a
// batch, so its task runs are bounded (a batch of a large workflow is
// refused before anything is written), and TriggerManyBatch sizes batches
// that fit.
func TestTriggerManyBoundsTheTaskRunsOfOneBatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ want, tasks, batch int }{
		{500, 1, 500},
		{500, 1000, 100},
		{10_000, 1, store.TriggerManyMax},
		{1, 1000, 1},
		{500, 0, 500},
		{3, store.TriggerManyMaxTaskRuns * 2, 1},
	} {
		if got := store.TriggerManyBatch(c.want, c.tasks); got != c.batch {
			t.Errorf("TriggerManyBatch(%d, %d) = %d, want %d", c.want, c.tasks, got, c.batch)
		}
	}
	f := newFixture(t)
	var src strings.Builder
	src.WriteString("name: wide\ntasks:\n")
	const tasks = 200
	for i := range tasks {
		fmt.Fprintf(&src, "  - {name: t%d, handler: noop}\n", i)
	}
	f.apply(src.String())
	n := store.TriggerManyBatch(store.TriggerManyMax, tasks)
	if _, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "wide", Params: make([]json.RawMessage, n+1)}); !errors.Is(err, core.ErrBadParams) {
		t.Fatalf("%d runs of %d tasks: %v, want core.ErrBadParams", n+1, tasks, err)
	}
	if got := f.count(`SELECT count(*) FROM workflow_runs`); got != 0 {
		t.Fatalf("%d runs written by a refused batch", got)
	}
	// Every run gets every task (a batch well inside the bound: writing
	// 100,000 task runs would only slow the test).
	ids, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "wide", Params: make([]json.RawMessage, 3)})
	if err != nil || len(ids) != 3 {
		t.Fatalf("3 runs of %d tasks: %d ids, %v", tasks, len(ids), err)
	}
	if got := f.count(`SELECT count(*) FROM task_runs`); got != 3*tasks {
		t.Fatalf("%d task runs, want %d", got, 3*tasks)
	}
	if got := f.count(`SELECT count(*) FROM outbox`); got != 3*tasks {
		t.Fatalf("%d outbox rows, want %d (every task is a root)", got, 3*tasks)
	}
}
