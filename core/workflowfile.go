package core

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// ScheduleDef is one entry of a workflow file's optional top-level
// `schedules:` list: a schedule of the file's workflow, with the fields of
// `ffctl schedule create` (the workflow is the file's):
//
//	schedules:
//	  - name: nightly              # [a-z0-9][a-z0-9._-]*, unique among all schedules
//	    cron: "30 2 * * *"         # 5 fields, 6 with seconds first, or @daily, @every 1h, ...
//	    timezone: Europe/Berlin    # IANA zone; default UTC
//	    params: {date: today}      # every run's params (a JSON object)
//	    overlap: skip              # skip | allow | cancel-previous (default skip)
//	    catchup: one               # none | one | all (default none)
//	    catchup_window: 1h         # Go duration; one and all need it, none refuses it
//	    jitter: 30s                # Go duration; default 0
//
// Only the shape is checked here (unknown fields, types, names, duplicate
// names); the cron expression, zone, policies and params are checked by
// schedule.ValidateFile (the CLI's before it connects, the store's when it
// applies the file), as `schedule create` checks them.
type ScheduleDef struct {
	Name          string          `json:"name"`
	Cron          string          `json:"cron"`
	Timezone      string          `json:"timezone,omitempty"`
	Params        json.RawMessage `json:"params,omitempty"`
	Overlap       string          `json:"overlap,omitempty"`
	Catchup       string          `json:"catchup,omitempty"`
	CatchupWindow *Duration       `json:"catchup_window,omitempty"`
	Jitter        *Duration       `json:"jitter,omitempty"`
}

// WorkflowFile is a parsed workflow file: the definition (stored as a
// version of the workflow) and its schedules (stored in the schedules
// table, owned by the file; not part of any version).
type WorkflowFile struct {
	Definition *Definition
	// Schedules is the file's `schedules:` list in file order; empty when
	// the file has none (every schedule the file declared before is then
	// deleted at apply).
	Schedules []ScheduleDef
}

// MaxWorkflowFileBytes bounds a workflow file: the file `ffctl workflow
// apply` reads, the body the HTTP API takes (4 MiB).
const MaxWorkflowFileBytes = 4 << 20

// ParseWorkflowFile decodes a workflow file as ParseDefinition does, with
// an optional top-level `schedules:` list of ScheduleDef. An entry's error
// names it: `schedule "nightly": unknown field "cronn"` (or `schedules[2]: `
// when it has no usable name). Every error wraps ErrBadWorkflow.
func ParseWorkflowFile(data []byte) (*WorkflowFile, error) {
	doc, err := decodeWorkflowFile(data)
	if err != nil {
		return nil, err
	}
	raw, has := doc["schedules"]
	delete(doc, "schedules")
	def, err := definitionOf(doc)
	if err != nil {
		return nil, err
	}
	f := &WorkflowFile{Definition: def, Schedules: []ScheduleDef{}}
	if !has || raw == nil {
		return f, nil
	}
	list, ok := jsonable(raw).([]any)
	if !ok {
		return nil, fmt.Errorf("%w: schedules: want a list of schedules (name, cron, ...)", ErrBadWorkflow)
	}
	seen := map[string]bool{}
	for i, e := range list {
		sd, err := scheduleDefOf(i, e)
		if err != nil {
			return nil, err
		}
		if seen[sd.Name] {
			return nil, fmt.Errorf("%w: schedule %q is declared twice", ErrBadWorkflow, sd.Name)
		}
		seen[sd.Name] = true
		f.Schedules = append(f.Schedules, sd)
	}
	return f, nil
}

// scheduleDefOf decodes entry i of a file's schedules list.
func scheduleDefOf(i int, e any) (ScheduleDef, error) {
	where := fmt.Sprintf("schedules[%d]", i)
	fields, ok := e.(map[string]any)
	if !ok {
		return ScheduleDef{}, fmt.Errorf("%w: %s: want a mapping (name, cron, ...)", ErrBadWorkflow, where)
	}
	if n, ok := fields["name"].(string); ok && n != "" {
		where = fmt.Sprintf("schedule %q", n)
	}
	var sd ScheduleDef
	if err := decodeStrict(fields, &sd); err != nil {
		// Name the field: decode the fields one at a time, by name.
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if kerr := decodeStrict(map[string]any{k: fields[k]}, &ScheduleDef{}); kerr != nil {
				if strings.Contains(kerr.Error(), "unknown field") {
					return sd, fmt.Errorf("%w: %s: %s", ErrBadWorkflow, where, strings.TrimPrefix(kerr.Error(), "json: "))
				}
				return sd, fmt.Errorf("%w: %s: %s: %s", ErrBadWorkflow, where, k, strings.TrimPrefix(kerr.Error(), "json: "))
			}
		}
		return sd, fmt.Errorf("%w: %s: %s", ErrBadWorkflow, where, strings.TrimPrefix(err.Error(), "json: "))
	}
	if err := ValidateName("schedule", sd.Name); err != nil {
		return sd, fmt.Errorf("%w: %s: %s", ErrBadWorkflow, where, strings.TrimPrefix(err.Error(), ErrBadWorkflow.Error()+": "))
	}
	return sd, nil
}

// nulField finds a text of the workflow file's mapping doc that holds the
// NUL character and names it as a person reads the file: "description",
// `task "load": params.day`, `schedules[0].timezone`.
func nulField(doc map[string]any) (string, bool) {
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.ContainsRune(k, 0) {
			return "a top-level key", true
		}
		tasks, isTasks := doc[k].([]any)
		if k != "tasks" || !isTasks {
			if path, found := findNUL(map[string]any{k: doc[k]}, ""); found {
				return strings.TrimPrefix(path, "."), true
			}
			continue
		}
		for i, t := range tasks {
			where := fmt.Sprintf("tasks[%d]", i)
			if tm, ok := t.(map[string]any); ok {
				if name, ok := tm["name"].(string); ok && !strings.ContainsRune(name, 0) {
					where = fmt.Sprintf("task %q:", name)
				}
			}
			if path, found := findNUL(t, ""); found {
				if strings.HasSuffix(where, ":") {
					return where + " " + strings.TrimPrefix(path, "."), true
				}
				return where + path, true
			}
		}
	}
	return "", false
}
