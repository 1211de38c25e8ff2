package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// RunTasks are the values one run of a definition stores in its task runs
// beyond the definition's own, task by task in Definition.Tasks' order.
type RunTasks struct {
	// Keys are the tasks' idempotency keys as stored
	// (StoredIdempotencyKey; "" for a task without an idempotency_key);
	// nil when no task of the definition has one.
	Keys []string
	// Params are the tasks' params with their templates rendered (see
	// renderTaskParams); a nil entry for a task whose params hold no
	// template (the run stores the definition's params as they are); nil
	// when no task's params hold one.
	Params []json.RawMessage
}

// RenderRunTasks renders what each task run of one run of def stores from
// the run's params (a JSON object ValidateParams accepted; numbers render
// verbatim): the tasks' idempotency keys and their templated params. It is
// the one place a trigger renders templates: run trigger, the bulk trigger
// and a schedule's tick all create runs through it (and schedule create
// checks a schedule's params with it). It returns the zero RunTasks,
// decoding nothing, when no task of def has an idempotency_key or a
// template in its params. Errors wrap ErrBadParams and name the task:
// params that do not decode, a template that cannot be rendered (a missing
// param), a key that cannot be stored, rendered params ValidateParams
// refuses.
func RenderRunTasks(def *Definition, params json.RawMessage) (RunTasks, error) {
	keyed := slices.ContainsFunc(def.Tasks, func(t TaskDef) bool { return t.IdempotencyKey != "" })
	templated := slices.ContainsFunc(def.Tasks, func(t TaskDef) bool { return hasParamTemplate(t.Params) })
	if !keyed && !templated {
		return RunTasks{}, nil
	}
	pmap, err := decodeKeyParams(params)
	if err != nil {
		return RunTasks{}, err
	}
	var out RunTasks
	for _, t := range def.Tasks {
		if keyed {
			key, err := taskIdempotencyKey(def.Name, t, pmap)
			if err != nil {
				return RunTasks{}, err
			}
			out.Keys = append(out.Keys, key)
		}
		if templated {
			p, err := renderTaskParams(t, KeyData{Params: pmap, Workflow: def.Name, Task: t.Name})
			if err != nil {
				return RunTasks{}, err
			}
			out.Params = append(out.Params, p)
		}
	}
	return out, nil
}

// decodeKeyParams decodes checked params for the tasks' idempotency keys
// (numbers kept verbatim). Errors wrap ErrBadParams.
func decodeKeyParams(params json.RawMessage) (map[string]any, error) {
	var pmap map[string]any
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber() // numbers render verbatim in idempotency keys
	if err := dec.Decode(&pmap); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadParams, err)
	}
	return pmap, nil
}

// taskIdempotencyKey renders the idempotency key template of task t of
// workflow from the run's params pmap and returns it as stored ("" when t
// has none). Errors wrap ErrBadParams.
func taskIdempotencyKey(workflow string, t TaskDef, pmap map[string]any) (string, error) {
	key, err := RenderIdempotencyKey(t.IdempotencyKey, KeyData{Params: pmap, Workflow: workflow, Task: t.Name})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadParams, err)
	}
	if key != "" {
		if key, err = StoredIdempotencyKey(key); err != nil {
			return "", fmt.Errorf("%w: task %q: %v", ErrBadParams, t.Name, err)
		}
	}
	return key, nil
}
