package client_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// approval waits for order.approved with the run's order_id as its key.
const approval = `
name: approval
tasks:
  - name: approve
    wait_for: {event: order.approved, key: "params.order_id", timeout: 1h}
  - {name: ship, handler: noop, depends_on: [approve]}
`

// Approval is an event's payload as a caller's struct.
type Approval struct {
	By string `json:"by"`
}

// TestAnEventCompletesItsWaitOnceAndIsListed: a run's wait started by a
// scheduler pass is completed by SendEvent with the run's key (SUCCEEDED,
// the struct's encoding its result, audited with the actor); the same id
// again is a duplicate that completes nothing and returns the first; an
// event of another key completes nothing; ListEvents shows both, newest
// first, filtered by name and key.
func TestAnEventCompletesItsWaitOnceAndIsListed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	storetest.Apply(t, f.s, approval)
	run := storetest.Trigger(t, f.s, "approval", `{"order_id": 42}`)
	storetest.Advance(t, f.s)
	if st := storetest.Task(t, f.s, run, "approve").State; st != core.TaskRunning {
		t.Fatalf("approve is %s after the pass, want RUNNING (waiting)", st)
	}
	res, err := f.c.SendEvent(f.ctx, "order.approved", Approval{By: "ana"}, client.SendEventOptions{Key: "42", ID: "approval-42", Actor: "billing"})
	if err != nil || res.Duplicate || len(res.Completed) != 1 || res.Completed[0].RunID != run || res.Completed[0].Task != "approve" || res.Completed[0].Workflow != "approval" {
		t.Fatalf("SendEvent = %+v, %v; want approve of %s completed", res, err, run)
	}
	if res.Event.ID != "approval-42" || res.Event.SentBy != "billing" || !res.Event.KeepUntil.After(res.Event.ReceivedAt.Add(23*time.Hour)) {
		t.Fatalf("event %+v: want id approval-42, sent by billing, kept about a day", res.Event)
	}
	task := storetest.Task(t, f.s, run, "approve")
	if task.State != core.TaskSucceeded || string(task.Result) != `{"by": "ana"}` {
		t.Fatalf("approve: %s with result %s, want SUCCEEDED with the payload", task.State, task.Result)
	}
	again, err := f.c.SendEvent(f.ctx, "order.approved", nil, client.SendEventOptions{Key: "42", ID: "approval-42"})
	if err != nil || !again.Duplicate || len(again.Completed) != 0 || len(again.Event.Deliveries) != 1 || string(again.Event.Payload) != `{"by": "ana"}` {
		t.Fatalf("the same id again: %+v, %v; want a duplicate returning the first event", again, err)
	}
	other, err := f.c.SendEvent(f.ctx, "order.approved", json.RawMessage(`{"by": "bob"}`), client.SendEventOptions{Key: "43", Lookback: time.Hour})
	if err != nil || other.Duplicate || other.Completed == nil || len(other.Completed) != 0 || other.Event.ID == "" || other.Event.Deliveries == nil {
		t.Fatalf("an event no wait has: %+v, %v; want a new id, and no deliveries as empty lists (JSON [])", other, err)
	}

	evs, err := f.c.ListEvents(f.ctx, client.EventFilter{Name: "order.approved"})
	if err != nil || len(evs) != 2 || evs[0].ID != other.Event.ID || evs[1].ID != "approval-42" || len(evs[1].Deliveries) != 1 {
		t.Fatalf("ListEvents = %+v, %v; want the event of key 43, then approval-42 with its delivery", evs, err)
	}
	key := "42"
	if evs, err := f.c.ListEvents(f.ctx, client.EventFilter{Key: &key, Limit: 1}); err != nil || len(evs) != 1 || evs[0].ID != "approval-42" {
		t.Fatalf("ListEvents by key = %+v, %v", evs, err)
	}
}

// TestBadEventsGetAClearErrorAndWriteNothing: each bad send or list is
// the client's error with the store's message, and no event is stored.
func TestBadEventsGetAClearErrorAndWriteNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	send := func(name string, payload any, o client.SendEventOptions) func() error {
		return func() error { _, err := f.c.SendEvent(f.ctx, name, payload, o); return err }
	}
	list := func(flt client.EventFilter) func() error {
		return func() error { _, err := f.c.ListEvents(f.ctx, flt); return err }
	}
	nul := "a\x00b"
	cases := []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"no name", send("", nil, client.SendEventOptions{}), client.ErrInvalidInput, "the event name is missing"},
		{"a bad name", send("Order Approved", nil, client.SendEventOptions{}), client.ErrInvalidInput, `event name "Order Approved" must match`},
		{"a NUL in the key", send("e", nil, client.SendEventOptions{Key: nul}), client.ErrInvalidInput, "the key must be UTF-8 without NUL"},
		{"a key too long", send("e", nil, client.SendEventOptions{Key: strings.Repeat("k", core.MaxEventKeyLength+1)}), client.ErrInvalidInput, "longer than the limit of 512"},
		{"an id too long", send("e", nil, client.SendEventOptions{ID: strings.Repeat("i", store.MaxEventIDLength+1)}), client.ErrInvalidInput, "the id is 257 bytes"},
		{"a NUL in the id", send("e", nil, client.SendEventOptions{ID: nul}), client.ErrInvalidInput, "the id must be UTF-8 without NUL"},
		{"a payload not JSON", send("e", json.RawMessage(`{"by":`), client.SendEventOptions{}), client.ErrInvalidParams, "event payload: invalid params: not JSON"},
		{"a payload an array", send("e", []byte(`[1]`), client.SendEventOptions{}), client.ErrInvalidParams, "want a JSON object, got an array"},
		{"a payload with NUL", send("e", map[string]string{"by": nul}, client.SendEventOptions{}), client.ErrInvalidParams, "$.by contains a NUL character"},
		{"a payload JSON cannot hold", send("e", map[string]any{"c": make(chan int)}, client.SendEventOptions{}), client.ErrInvalidParams, "cannot be encoded as JSON"},
		{"a negative lookback", send("e", nil, client.SendEventOptions{Lookback: -time.Second}), client.ErrInvalidInput, "the lookback must be positive"},
		{"a lookback past a year", send("e", nil, client.SendEventOptions{Lookback: store.EventLookbackMax + time.Hour}), client.ErrInvalidInput, "at most 8784h0m0s"},
		{"a list of a bad name", list(client.EventFilter{Name: "A"}), client.ErrInvalidInput, `event name "A" must match`},
		{"a list of a NUL key", list(client.EventFilter{Key: &nul}), client.ErrInvalidInput, "without NUL"},
		{"a list limit out of range", list(client.EventFilter{Limit: store.ListEventsMax + 1}), client.ErrInvalidInput, "event list limit 1001: want 1 to 1000"},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, c.want) || !contains(err, c.text) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.want, c.text)
		}
	}
	if n := f.count(`SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d events stored by refused sends", n)
	}
}
