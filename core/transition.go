package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Transition kinds: a TransitionEvent is of a run or of a task.
const (
	TransitionRun  = "run"
	TransitionTask = "task"
)

// TransitionEvent is one message of the transition stream (issue 28): a
// run or task of a run moved from one state to another, as committed. Its
// JSON is the message body the publisher sends to the events exchange.
//
// EventID is unique per transition and stays the same when a message is
// published again (the stream is at-least-once): consumers de-duplicate
// by it. Seq numbers the transitions of one run 1, 2, 3 ... with no gap,
// in an order that keeps each run's and each task's own transitions in
// the order they committed (transitions of different tasks of a run may
// be interleaved either way); a consumer that sees seq n+2 before n+1 has
// a message still to come. From is empty for a creation (a run or task
// inserted in state To). Task, TaskRunID and Attempt are empty (zero) for
// a run's transition. At is the database's clock at the transition.
type TransitionEvent struct {
	EventID   string    `json:"event_id"`
	Seq       int64     `json:"seq"`
	RunID     string    `json:"run_id"`
	Workflow  string    `json:"workflow"`
	Kind      string    `json:"kind"`
	Task      string    `json:"task,omitempty"`
	TaskRunID string    `json:"task_run_id,omitempty"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to"`
	Attempt   int       `json:"attempt"`
	At        time.Time `json:"at"`
	Actor     string    `json:"actor,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// maxRoutingKey is AMQP's limit on a routing key (a shortstr), in bytes.
const maxRoutingKey = 255

// longTaskKey replaces the task name in a task event's routing key that
// would be longer than maxRoutingKey (a long workflow name with a long
// for_each element name): "task.<workflow>._long.<state>". Consumers that
// need the exact task read the body.
const longTaskKey = "_long"

// RoutingKey returns the event's routing key on the topic exchange:
// "run.<workflow>.<state>" for a run, "task.<workflow>.<task>.<state>" for
// a task, state being To. Names may contain dots, so a key alone does not
// say where the workflow name ends: "task.a.b.c.READY" is workflow "a",
// task "b.c" or workflow "a.b", task "c". Filter on the body's Workflow for
// an exact match. A task key longer than 255 bytes names the task
// "_long".
func (e TransitionEvent) RoutingKey() string {
	if e.Kind == TransitionRun {
		return "run." + e.Workflow + "." + e.To
	}
	key := "task." + e.Workflow + "." + e.Task + "." + e.To
	if len(key) > maxRoutingKey {
		key = "task." + e.Workflow + "." + longTaskKey + "." + e.To
	}
	return key
}

// ErrBadTransitionEvent is wrapped by DecodeTransitionEvent's errors.
var ErrBadTransitionEvent = errors.New("not a transition event")

// DecodeTransitionEvent parses a message body of the transition stream.
// Unknown fields are ignored (a later version may add some). Errors wrap
// ErrBadTransitionEvent: the body is not JSON of that shape, or it lacks
// event_id, run_id, workflow, a kind of run or task, to, or a positive
// seq.
func DecodeTransitionEvent(body []byte) (TransitionEvent, error) {
	var e TransitionEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return TransitionEvent{}, fmt.Errorf("%w: %w", ErrBadTransitionEvent, err)
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"event_id", e.EventID}, {"run_id", e.RunID}, {"workflow", e.Workflow}, {"to", e.To}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if e.Seq <= 0 {
		missing = append(missing, "seq")
	}
	if e.Kind != TransitionRun && e.Kind != TransitionTask {
		missing = append(missing, "kind (run or task)")
	}
	if len(missing) > 0 {
		return TransitionEvent{}, fmt.Errorf("%w: missing %s", ErrBadTransitionEvent, strings.Join(missing, ", "))
	}
	return e, nil
}

// StreamBindings returns the routing-key patterns that bind a queue to the
// events of workflow (every event when workflow is empty): "run.<w>.*"
// and "task.<w>.#". The task pattern also matches a workflow whose name
// starts with "<w>." (names may contain dots), so a consumer filters on the
// body's Workflow as well.
func StreamBindings(workflow string) []string {
	if workflow == "" {
		return []string{"#"}
	}
	return []string{"run." + workflow + ".*", "task." + workflow + ".#"}
}
