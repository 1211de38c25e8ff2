package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
		// A for_each task's runs are its elements', rendered with each
		// element when the scheduler expands it (RenderElement): here its
		// templates are rendered with an empty .Item only to refuse a
		// missing param now, and the task's own run keeps no key and the
		// definition's params.
		each := t.Kind() == KindForEach
		var item any = ""
		if each {
			item = itemProbe(t)
		}
		if keyed {
			key, err := taskIdempotencyKey(KeyData{Params: pmap, Workflow: def.Name, Task: t.Name, Item: item}, t)
			if err != nil {
				return RunTasks{}, err
			}
			if each {
				key = ""
			}
			out.Keys = append(out.Keys, key)
		}
		if templated {
			p, err := renderTaskParams(t, KeyData{Params: pmap, Workflow: def.Name, Task: t.Name, Item: item})
			if err != nil {
				return RunTasks{}, err
			}
			if each {
				p = nil
			}
			out.Params = append(out.Params, p)
		}
	}
	return out, nil
}

// itemProbe is the .Item a for_each task's templates are rendered with at
// trigger, before any element exists: a map holding every field path they
// read under .Item (`.Item.file` gives {"file": ""}, nested as read), so
// that the trigger refuses a missing param and nothing else. The element
// itself is checked when the scheduler expands the task (RenderElement).
func itemProbe(t TaskDef) any {
	var paths [][]string
	add := func(s string) {
		tmpl, err := parseTemplate("probe", s)
		if err != nil || tmpl.Tree == nil {
			return // the render that follows reports it
		}
		walkFields(tmpl.Tree.Root, func(ident []string) {
			if ident[0] == "Item" && len(ident) > 1 {
				paths = append(paths, ident[1:])
			}
		})
	}
	if strings.Contains(t.IdempotencyKey, "{{") {
		add(t.IdempotencyKey)
	}
	if v, err := decodeTaskParams(t.Params); err == nil {
		_, _ = mapStrings(v, "params", func(_, s string) (string, error) {
			add(s)
			return s, nil
		})
	}
	if len(paths) == 0 {
		return ""
	}
	probe := map[string]any{}
	for _, p := range paths {
		m := probe
		for i, name := range p {
			if i == len(p)-1 {
				if _, ok := m[name]; !ok {
					m[name] = ""
				}
				break
			}
			next, ok := m[name].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[name] = next
			}
			m = next
		}
	}
	return probe
}

// RenderElement renders what the task run of one element of for_each task
// t stores, over the run's params (a JSON object) and item (the element,
// JSON): its params (nil: t's own, which hold no template) and its
// idempotency key as stored ("" for none). Errors wrap ErrBadParams and
// name the task.
func RenderElement(workflow string, t TaskDef, params, item json.RawMessage) (json.RawMessage, string, error) {
	pmap, err := decodeKeyParams(params)
	if err != nil {
		return nil, "", err
	}
	var it any
	dec := json.NewDecoder(bytes.NewReader(item))
	dec.UseNumber()
	if err := dec.Decode(&it); err != nil {
		return nil, "", fmt.Errorf("%w: task %q: element: %v", ErrBadParams, t.Name, err)
	}
	data := KeyData{Params: pmap, Workflow: workflow, Task: t.Name, Item: it}
	p, err := renderTaskParams(t, data)
	if err != nil {
		return nil, "", err
	}
	key, err := taskIdempotencyKey(data, t)
	if err != nil {
		return nil, "", err
	}
	return p, key, nil
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

// taskIdempotencyKey renders the idempotency key template of task t over
// data and returns it as stored ("" when t has none). Errors wrap
// ErrBadParams.
func taskIdempotencyKey(data KeyData, t TaskDef) (string, error) {
	key, err := RenderIdempotencyKey(t.IdempotencyKey, data)
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
