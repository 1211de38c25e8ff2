package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// TaskIdempotencyKeys renders the task idempotency keys of one run of def
// with params (a JSON object ValidateParams accepted; numbers render
// verbatim), task by task in def.Tasks' order, each as stored
// (StoredIdempotencyKey; "" for a task without an idempotency_key). It
// returns nil, decoding nothing, when no task of def has a template.
// Errors wrap ErrBadParams: params that do not decode, a template that
// cannot be rendered (a missing param) or a key that cannot be stored.
func TaskIdempotencyKeys(def *Definition, params json.RawMessage) ([]string, error) {
	if !slices.ContainsFunc(def.Tasks, func(t TaskDef) bool { return t.IdempotencyKey != "" }) {
		return nil, nil
	}
	pmap, err := decodeKeyParams(params)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(def.Tasks))
	for _, t := range def.Tasks {
		key, err := taskIdempotencyKey(def.Name, t, pmap)
		if err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, nil
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
