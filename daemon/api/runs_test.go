package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/api"
)

const (
	oneTask = "name: one\ntasks:\n  - {name: t, handler: noop}\n"
	pair    = "name: pair\ntasks:\n  - {name: b, handler: noop, depends_on: [a]}\n  - {name: a, handler: noop}\n"
)

// TestATriggerIsCreatedOnceAndShownAsTheCLIShowsIt: a trigger answers 201
// with the run id and its Location; the same Idempotency-Key and params
// answer 200 with the same run, other params 409 naming it; the run is
// shown by a prefix with its tasks in DAG order, and listed by workflow
// and state.
func TestATriggerIsCreatedOnceAndShownAsTheCLIShowsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, oneTask, pair)
	key := map[string]string{"Idempotency-Key": "order-42"}
	a := f.do(call{method: "POST", path: "/v1/workflows/pair/runs", role: auth.RoleOperator, body: `{"params": {"order": 42}}`, header: key})
	var first struct {
		RunID    uuid.UUID `json:"run_id"`
		Existing bool
	}
	a.json(t, &first)
	if a.status != http.StatusCreated || first.Existing || a.header.Get("Location") != "/v1/runs/"+first.RunID.String() {
		t.Fatalf("trigger: %d %s (Location %q)", a.status, a.body, a.header.Get("Location"))
	}
	a = f.do(call{method: "POST", path: "/v1/workflows/pair/runs", role: auth.RoleOperator, body: `{"params": {"order": 42}}`, header: key})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), first.RunID.String()) || !strings.Contains(string(a.body), `"existing":true`) {
		t.Fatalf("same key again: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "POST", path: "/v1/workflows/pair/runs", role: auth.RoleOperator, body: `{"params": {"order": 43}}`, header: key})
	if code, msg := a.errorOf(t); a.status != http.StatusConflict || code != api.CodeConflict || !strings.Contains(msg, first.RunID.String()) {
		t.Fatalf("same key, other params: %d %s", a.status, a.body)
	}

	a = f.do(call{method: "GET", path: "/v1/runs/" + first.RunID.String()[:8], role: auth.RoleViewer})
	var run store.Run
	a.json(t, &run)
	if a.status != http.StatusOK || run.ID != first.RunID || len(run.Tasks) != 2 || run.Tasks[0].Name != "a" || string(run.Params) != `{"order":42}` {
		t.Fatalf("show by prefix: %d %s", a.status, a.body)
	}
	f.trigger("one", `{}`)
	a = f.do(call{method: "GET", path: "/v1/runs?workflow=pair&state=RUNNING&limit=5", role: auth.RoleViewer})
	var runs []store.Run
	a.json(t, &runs)
	if a.status != http.StatusOK || len(runs) != 1 || runs[0].ID != first.RunID {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
}

// TestAWaitAnswersTheEndedRunOr408: a wait on a run still going answers
// 408 (code timeout) after its timeout, the run untouched; once the run
// has ended, 200 with it.
func TestAWaitAnswersTheEndedRunOr408(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, oneTask)
	run := f.trigger("one", `{}`)
	a := f.do(call{method: "GET", path: "/v1/runs/" + run.String() + "/wait?timeout=200ms", role: auth.RoleViewer})
	if code, msg := a.errorOf(t); a.status != http.StatusRequestTimeout || code != api.CodeTimeout || !strings.Contains(msg, "has not ended after 200ms") {
		t.Fatalf("wait on a running run: %d %s", a.status, a.body)
	}
	f.finishTasks(run, store.OutcomeSucceeded)
	a = f.do(call{method: "GET", path: "/v1/runs/" + run.String() + "/wait", role: auth.RoleViewer})
	var got store.Run
	a.json(t, &got)
	if a.status != http.StatusOK || got.State != "SUCCEEDED" || string(got.Tasks[0].Result) != `{"ok":true}` {
		t.Fatalf("wait on an ended run: %d %s", a.status, a.body)
	}
}

// TestCancelAndRequeueAreAuditedWithTheTokensName: a cancel and a requeue
// through the API write the history rows ffctl's would, with the actor
// api:NAME of the token and the reason given; a requeue of a task that
// is not DEAD is 409; DEAD tasks are listed.
func TestCancelAndRequeueAreAuditedWithTheTokensName(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, oneTask, pair)
	run := f.trigger("pair", `{}`)
	a := f.do(call{method: "POST", path: "/v1/runs/" + run.String() + "/cancel", role: auth.RoleOperator, body: `{"reason": "wrong order"}`})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"tasks_cancelled":2`) {
		t.Fatalf("cancel: %d %s", a.status, a.body)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE actor = 'api:operator' AND reason = 'run cancelled: wrong order' AND to_state = 'CANCELLED'`); n != 2 {
		t.Fatalf("%d cancel audit rows by api:operator, want 2", n)
	}
	a = f.do(call{method: "POST", path: "/v1/runs/" + run.String() + "/cancel", role: auth.RoleOperator, body: `{"reason": "again"}`})
	if code, _ := a.errorOf(t); a.status != http.StatusConflict || code != api.CodeConflict {
		t.Fatalf("cancel of a cancelled run: %d %s", a.status, a.body)
	}

	dead := f.trigger("one", `{}`)
	f.finishTasks(dead, store.OutcomeFailed)
	a = f.do(call{method: "GET", path: "/v1/dead?workflow=one", role: auth.RoleViewer})
	var tasks []store.TaskRun
	a.json(t, &tasks)
	if a.status != http.StatusOK || len(tasks) != 1 || tasks[0].RunID != dead || tasks[0].Workflow != "one" {
		t.Fatalf("dead list: %d %s", a.status, a.body)
	}
	path := "/v1/tasks/" + tasks[0].ID.String() + "/requeue"
	a = f.do(call{method: "POST", path: path, role: auth.RoleOperator, body: `{"reason": "card API is back"}`})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"requeued":true`) {
		t.Fatalf("requeue: %d %s", a.status, a.body)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE actor = 'api:operator' AND reason = 'card API is back' AND from_state = 'DEAD'`); n != 1 {
		t.Fatalf("%d requeue audit rows by api:operator, want 1", n)
	}
	a = f.do(call{method: "POST", path: path, role: auth.RoleOperator, body: `{"reason": "again"}`})
	if code, msg := a.errorOf(t); a.status != http.StatusConflict || code != api.CodeConflict || !strings.Contains(msg, "not DEAD") {
		t.Fatalf("requeue of a PENDING task: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "GET", path: "/v1/tasks/" + tasks[0].ID.String()[:8], role: auth.RoleViewer})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"attempts"`) || !strings.Contains(string(a.body), "api:operator") {
		t.Fatalf("task show: %d %s", a.status, a.body)
	}
}

// TestAWorkflowFileIsAppliedAsTheCLIAppliesIt: an admin's PUT of a YAML
// file stores it (201), the same again is unchanged (200), a JSON file
// works too; the file's schedules are audited with the token's name; a
// file naming another workflow than the path is 400 and stores nothing;
// the list shows each newest version.
func TestAWorkflowFileIsAppliedAsTheCLIAppliesIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{})
	const nightly = "name: nightly\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: nightly-2am, cron: '0 2 * * *'}\n"
	a := f.do(call{method: "PUT", path: "/v1/workflows/nightly", role: auth.RoleAdmin, body: nightly, header: map[string]string{"Content-Type": "application/yaml"}})
	if a.status != http.StatusCreated || !strings.Contains(string(a.body), `"version":1`) || !strings.Contains(string(a.body), `"action":"created"`) {
		t.Fatalf("apply: %d %s", a.status, a.body)
	}
	if n := f.count(`SELECT count(*) FROM schedule_events WHERE actor = 'api:admin' AND action = 'create'`); n != 1 {
		t.Fatalf("%d schedule audit rows by api:admin, want 1", n)
	}
	a = f.do(call{method: "PUT", path: "/v1/workflows/nightly", role: auth.RoleAdmin, body: nightly, header: map[string]string{"Content-Type": "application/yaml"}})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"created":false`) {
		t.Fatalf("apply again: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "PUT", path: "/v1/workflows/hourly", role: auth.RoleAdmin, body: `{"name": "hourly", "tasks": [{"name": "a", "handler": "noop"}]}`})
	if a.status != http.StatusCreated {
		t.Fatalf("apply JSON: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "PUT", path: "/v1/workflows/other", role: auth.RoleAdmin, body: oneTask, invalid: true})
	if code, msg := a.errorOf(t); a.status != http.StatusBadRequest || code != api.CodeInvalidInput || !strings.Contains(msg, `it names workflow "one", not "other"`) {
		t.Fatalf("apply under another name: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "PUT", path: "/v1/workflows/w", role: auth.RoleAdmin, body: "name: w\ntasks:\n  - {name: a, handler: sleep, params: {durration: 1s}}\n"})
	if code, msg := a.errorOf(t); a.status != http.StatusBadRequest || code != api.CodeInvalidInput || !strings.Contains(msg, `task a: handler sleep: params: json: unknown field "durration"`) {
		t.Fatalf("apply with bad built-in params: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "GET", path: "/v1/workflows", role: auth.RoleViewer})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"name":"hourly"`) || strings.Contains(string(a.body), `"name":"w"`) {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
}
