package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/api"
)

// approval waits for order.approved with the run's order_id as its key.
const approval = `
name: approval
tasks:
  - name: approve
    wait_for: {event: order.approved, key: "params.order_id", timeout: 7d, on_timeout: skip}
  - {name: ship, handler: noop, depends_on: [approve]}
`

// TestAnEventSentThroughTheAPICompletesItsWaitOnce: an operator's POST
// /v1/events/{name} with the run's key completes its wait (200, the task
// run in completed, the payload its result, audited as api:operator,
// kept for the lookback given); the same id again is 200 with duplicate
// true and nothing completed; a body-less send is an event without a key
// or payload; GET /v1/events lists them, filtered by name and key, with
// their deliveries. Every request and answer is held to openapi.yaml.
func TestAnEventSentThroughTheAPICompletesItsWaitOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, approval)
	run := f.trigger("approval", `{"order_id": 42}`)
	storetest.Advance(t, f.s)
	body := `{"key": "42", "payload": {"by": "ana"}, "id": "approval-42", "lookback": "7d"}`
	a := f.do(call{method: "POST", path: "/v1/events/order.approved", role: auth.RoleOperator, body: body})
	var res client.SendEventResult
	a.json(t, &res)
	if a.status != http.StatusOK || res.Duplicate || len(res.Completed) != 1 || res.Completed[0].RunID != run || res.Completed[0].Task != "approve" {
		t.Fatalf("send: %d %s", a.status, a.body)
	}
	if ev := res.Event; ev.ID != "approval-42" || ev.SentBy != "api:operator" || ev.KeepUntil.Sub(ev.ReceivedAt) != 7*24*time.Hour {
		t.Fatalf("send: event %+v, want approval-42 sent by api:operator, kept 7 days", ev)
	}
	if task := storetest.Task(t, f.s, run, "approve"); task.State != core.TaskSucceeded || string(task.Result) != `{"by": "ana"}` {
		t.Fatalf("approve: %s with %s, want SUCCEEDED with the payload", task.State, task.Result)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE actor = 'api:operator' AND to_state = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("%d history rows of the wait's end by api:operator, want 1", n)
	}

	a = f.do(call{method: "POST", path: "/v1/events/order.approved", role: auth.RoleOperator, body: `{"key": "42", "payload": {"by": "bob"}, "id": "approval-42"}`})
	var again client.SendEventResult
	a.json(t, &again)
	if a.status != http.StatusOK || !again.Duplicate || len(again.Completed) != 0 || len(again.Event.Deliveries) != 1 || string(again.Event.Payload) != `{"by":"ana"}` {
		t.Fatalf("the same id again: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "POST", path: "/v1/events/order.approved", role: auth.RoleOperator})
	var bare client.SendEventResult
	a.json(t, &bare)
	if a.status != http.StatusOK || bare.Duplicate || bare.Event.Key != "" || string(bare.Event.Payload) != `{}` || len(bare.Completed) != 0 {
		t.Fatalf("a send without a body: %d %s", a.status, a.body)
	}

	a = f.do(call{method: "GET", path: "/v1/events?name=order.approved&key=42&limit=5", role: auth.RoleViewer})
	var evs []client.Event
	a.json(t, &evs)
	if a.status != http.StatusOK || len(evs) != 1 || evs[0].ID != "approval-42" || len(evs[0].Deliveries) != 1 || evs[0].Deliveries[0].RunID != run {
		t.Fatalf("list by key: %d %s", a.status, a.body)
	}
	a = f.do(call{method: "GET", path: "/v1/events", role: auth.RoleViewer})
	a.json(t, &evs)
	if a.status != http.StatusOK || len(evs) != 2 || evs[0].ID != bare.Event.ID {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
}
